"""FastAPI dependencies, gathered here so routes read as plain signatures."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import Depends, Request

from memproxy.auth import Credential
from memproxy.errors import ApiError
from memproxy.services import Services


# ``async def`` on purpose: FastAPI runs a plain ``def`` dependency on a worker thread,
# and these do no blocking work, so two thread hops per request would be pure latency.
async def get_services(request: Request) -> Services:
    services: Services | None = getattr(request.app.state, "services", None)
    if services is None:
        raise ApiError(503, "memproxy is starting up", code="not_ready")
    return services


async def get_credential(
    request: Request, services: Annotated[Services, Depends(get_services)]
) -> Credential:
    credential = services.auth.authenticate(request.headers.get("authorization"))
    # For the access log: the tenant only ever appears there as this short hash.
    request.state.tenant_hash = credential.tenant_hash
    return credential


async def get_request_id(request: Request) -> str:
    rid: str | None = getattr(request.state, "request_id", None)
    return rid or uuid.uuid4().hex


ServicesDep = Annotated[Services, Depends(get_services)]
CredentialDep = Annotated[Credential, Depends(get_credential)]
RequestIdDep = Annotated[str, Depends(get_request_id)]
