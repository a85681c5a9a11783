"""``GET /v1/scopes``: the caller's users and agents with counts, for operators and the console.

Invariants:
- Tenant-bound: the tenant is the credential's; the listing only ever reads its rows.
- Strict query: unknown or repeated parameters and bad values are a 400 naming the parameter.
- ``user_id`` / ``agent_id`` select exactly (an empty value means "none"), ``q`` matches a
  substring of either id, case-insensitively.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from memproxy.api.deps import ClockDep, CredentialDep, DatabaseDep, allow_query
from memproxy.errors import ApiError
from memproxy.memory import scopes as scope_rows
from memproxy.scope import validate_id

router = APIRouter()

DEFAULT_LIMIT = 50
MAX_LIMIT = 500


def _limit(raw: str | None) -> int:
    if raw is None:
        return DEFAULT_LIMIT
    try:
        value = int(raw.strip())
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_LIMIT:
        raise ApiError(400, f"'limit' must be an integer between 1 and {MAX_LIMIT}.", param="limit",
                       code="invalid_value")  # fmt: skip
    return value


@router.get("/v1/scopes", dependencies=[allow_query("limit", "cursor", "q", "user_id", "agent_id")])
async def list_scopes(
    request: Request, credential: CredentialDep, db: DatabaseDep, clock: ClockDep
) -> Response:
    query = request.query_params
    limit = _limit(query.get("limit"))
    user_id, agent_id = (validate_id(query[k], k) if k in query else None for k in ("user_id", "agent_id"))
    search = validate_id(query.get("q"), "q") or None
    cursor = query.get("cursor") or None
    now = clock()
    page, next_cursor = await db.run(
        lambda c: scope_rows.list_scopes(
            c, credential.tenant, limit=limit, cursor=cursor, now=now, user_id=user_id, agent_id=agent_id,
            q=search,
        )
    )  # fmt: skip
    return JSONResponse({"object": "list", "data": [s.to_api() for s in page], "next_cursor": next_cursor})
