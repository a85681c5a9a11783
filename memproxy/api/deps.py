"""FastAPI dependencies, gathered here so routes read as plain signatures."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import Depends, Request

from memproxy.auth import Credential
from memproxy.errors import ApiError
from memproxy.memory.management import MemoryManagement
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


def management(services: Services) -> MemoryManagement:
    """The memory operations every door calls (REST routes, MCP tools), over this app's parts."""
    return MemoryManagement(
        services.store, services.capture, services.index, services.settings.recall.min_score
    )


ServicesDep = Annotated[Services, Depends(get_services)]
CredentialDep = Annotated[Credential, Depends(get_credential)]
RequestIdDep = Annotated[str, Depends(get_request_id)]


def allow_query(*names: str) -> Any:
    """A route dependency: query parameters other than ``names`` (or one given twice) are a 400.

    A typo such as ``?userid=`` must not silently widen a read to the whole tenant. It runs
    after authentication, so a caller without credentials still gets 401 first.
    """
    allowed = frozenset(names)

    async def check(request: Request, credential: CredentialDep) -> None:
        seen: set[str] = set()
        for name, _ in request.query_params.multi_items():
            if name not in allowed:
                known = f" Known parameters: {', '.join(sorted(allowed))}." if allowed else ""
                raise ApiError(400, f"Unknown query parameter: '{name}'.{known}", param=name,
                               code="unknown_parameter")  # fmt: skip
            if name in seen:
                raise ApiError(400, f"Query parameter '{name}' is given more than once.", param=name,
                               code="invalid_value")  # fmt: skip
            seen.add(name)

    return Depends(check)
