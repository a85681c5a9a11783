"""The memory management API (``/v1/memories…``): tenant-bound CRUD, search, forget, export/import.

The routes translate HTTP to the operations of ``memory.management`` (shared with the MCP
tools) and their answers back; the invariants below are those operations'.

Invariants:
- The tenant is always ``credential.tenant``; no body field, query parameter or header
  (nor an imported line's ``tenant``) can name another. Another tenant's memory id is
  answered exactly like a missing one (``errors.not_found``).
- User and agent ids come from the body (POST/PATCH) or query string (GET/DELETE) and,
  when absent there, from the ``X-Memproxy-User-Id`` / ``X-Memproxy-Agent-Id`` headers;
  every id passes ``scope.validate_id``.
- Selection semantics: *create*, *search* and *forget* act on one exact scope
  (tenant, user_id or "", agent_id or "") and need a user or an agent id; *list* and
  *export* treat an absent id as "any" (an empty one as exactly "").
- Request bodies are read through ``request_body`` (size limit, 400 on bad JSON); wrong
  types and unknown fields are a 400 naming the parameter, never silently ignored; so are
  unknown (or repeated) query parameters (``deps.allow_query``), so ``?userid=`` cannot
  widen a list or an export to the whole tenant.
- Fixed routes (``/export``, ``/search``, ``/import``) are declared before
  ``/v1/memories/{memory_id}`` so the path parameter never captures them.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from memproxy.api.body import read_bytes, read_json_object
from memproxy.api.deps import CredentialDep, ManagementDep, SettingsDep, allow_query
from memproxy.auth import Credential
from memproxy.config import Settings
from memproxy.memory.management import Caller

router = APIRouter()

NDJSON = "application/x-ndjson"
# Query strings each route understands; anything else is a 400 (a typo must not widen a read).
_NO_QUERY = allow_query()
_SCOPE_QUERY = allow_query("user_id", "agent_id")


def _caller(request: Request, credential: Credential) -> Caller:
    return Caller(credential.tenant, request.headers)


async def _body(request: Request, settings: Settings) -> dict[str, Any]:
    return await read_json_object(request, settings.server.max_body_bytes)


# --- create / list / search ------------------------------------------------------------


@router.post("/v1/memories", dependencies=[_NO_QUERY])
async def create_memory(
    request: Request, credential: CredentialDep, ops: ManagementDep, settings: SettingsDep
) -> Response:
    body = await _body(request, settings)
    created = await ops.create(_caller(request, credential), body)
    return JSONResponse(created.body, status_code=created.status)


@router.get(
    "/v1/memories",
    dependencies=[allow_query("user_id", "agent_id", "limit", "cursor", "source", "has_expiry")],
)
async def list_memories(request: Request, credential: CredentialDep, ops: ManagementDep) -> Response:
    page = await ops.list(_caller(request, credential), request.query_params, in_query=True)
    return JSONResponse(page)


@router.post("/v1/memories/search", dependencies=[_NO_QUERY])
async def search_memories(
    request: Request, credential: CredentialDep, ops: ManagementDep, settings: SettingsDep
) -> Response:
    body = await _body(request, settings)
    return JSONResponse(await ops.search(_caller(request, credential), body))


# --- forget / export / import (fixed paths: before /{memory_id}) ------------------------


@router.delete("/v1/memories", dependencies=[_SCOPE_QUERY])
async def forget_scope(request: Request, credential: CredentialDep, ops: ManagementDep) -> Response:
    return JSONResponse(await ops.forget(_caller(request, credential), request.query_params))


@router.get("/v1/memories/export", dependencies=[_SCOPE_QUERY])
async def export_memories(request: Request, credential: CredentialDep, ops: ManagementDep) -> Response:
    lines = await ops.export(_caller(request, credential), request.query_params)
    return Response(lines, media_type=NDJSON)


@router.post("/v1/memories/import", dependencies=[_NO_QUERY])
async def import_memories(
    request: Request, credential: CredentialDep, ops: ManagementDep, settings: SettingsDep
) -> Response:
    raw = await read_bytes(request, settings.server.max_body_bytes)
    return JSONResponse(await ops.import_(_caller(request, credential), raw))


# --- one memory -------------------------------------------------------------------------


@router.get("/v1/memories/{memory_id}", dependencies=[_NO_QUERY])
async def get_memory(
    memory_id: str, request: Request, credential: CredentialDep, ops: ManagementDep
) -> Response:
    return JSONResponse(await ops.get(_caller(request, credential), memory_id))


@router.patch("/v1/memories/{memory_id}", dependencies=[_NO_QUERY])
async def patch_memory(
    memory_id: str, request: Request, credential: CredentialDep, ops: ManagementDep, settings: SettingsDep
) -> Response:
    body = await _body(request, settings)
    return JSONResponse(await ops.update(_caller(request, credential), memory_id, body))


@router.delete("/v1/memories/{memory_id}", dependencies=[_NO_QUERY])
async def delete_memory(
    memory_id: str, request: Request, credential: CredentialDep, ops: ManagementDep
) -> Response:
    return JSONResponse(await ops.delete(_caller(request, credential), memory_id))


@router.get("/v1/memories/{memory_id}/history", dependencies=[_NO_QUERY])
async def memory_history(
    memory_id: str, request: Request, credential: CredentialDep, ops: ManagementDep
) -> Response:
    return JSONResponse(await ops.history(_caller(request, credential), memory_id))
