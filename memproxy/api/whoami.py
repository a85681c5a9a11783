"""``GET /v1/whoami``: which tenant the caller's credential is, for the console's header.

Invariants:
- Tenant-bound like every ``/v1`` route: it answers only about the credential it was called
  with, so it tells a caller nothing they could not work out from their own token or key.
- ``auth_mode`` says why another credential sees other scopes: in ``passthrough`` each
  token is its own tenant (a hash of it), in ``keys`` each key names its configured tenant.
- Served with the console's router (its one reader) and kept out of ``/openapi.json``: it is
  the console's helper, not part of the management API's contract.
"""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import JSONResponse, Response

from memproxy.api.deps import CredentialDep, SettingsDep, allow_query

router = APIRouter()


@router.get("/v1/whoami", include_in_schema=False, dependencies=[allow_query()])
async def whoami(credential: CredentialDep, settings: SettingsDep) -> Response:
    return JSONResponse({"object": "whoami", "tenant": credential.tenant, "auth_mode": settings.auth.mode})
