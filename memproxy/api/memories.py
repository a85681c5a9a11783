"""The memory management API (``/v1/memories…``): tenant-bound CRUD, search, forget, export/import.

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

import asyncio
from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from memproxy.api.body import read_bytes, read_json_object
from memproxy.api.deps import CredentialDep, ServicesDep, allow_query
from memproxy.errors import ApiError
from memproxy.headers import EXISTING_ID
from memproxy.memory.rows import SOURCES, UNSET, DuplicateMemory
from memproxy.memory.transfer import bad_param, optional_object, optional_text, parse_jsonl, to_jsonl
from memproxy.messages import content_text
from memproxy.outbox.capture import CAPTURED_ROLES
from memproxy.scope import AGENT_HEADER, SESSION_HEADER, USER_HEADER, Scope, header_id, validate_id
from memproxy.times import parse_time

router = APIRouter()

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
DEFAULT_TOP_K = 10
MAX_TOP_K = 100
NDJSON = "application/x-ndjson"

_CREATE_FIELDS = frozenset(
    {"user_id", "agent_id", "session_id", "text", "messages", "metadata", "expires_at"}
)
_PATCH_FIELDS = frozenset({"text", "metadata", "expires_at"})
_SEARCH_FIELDS = frozenset({"query", "user_id", "agent_id", "top_k", "min_score"})
# Roles a queued turn keeps (as capture does); system/developer prompts are not facts.
_TURN_ROLES = frozenset({"assistant", *CAPTURED_ROLES})
# Query strings each route understands; anything else is a 400 (a typo must not widen a read).
_NO_QUERY = allow_query()
_SCOPE_QUERY = allow_query("user_id", "agent_id")


# --- parameter parsing ------------------------------------------------------------------


def _reject_unknown(body: Mapping[str, Any], allowed: frozenset[str]) -> None:
    for name in body:
        if name not in allowed:
            raise bad_param(name, f"Unknown parameter: '{name}'.", code="unknown_parameter")


def _scope_id(values: Mapping[str, Any], headers: Mapping[str, str], field: str, header: str) -> str | None:
    """``values[field]`` if given, else the header; None when neither is there."""
    if values.get(field) is not None:
        return validate_id(values[field], field)
    if header in headers:
        return header_id(headers[header], header)
    return None


def _ids(values: Mapping[str, Any], request: Request) -> tuple[str | None, str | None]:
    return (
        _scope_id(values, request.headers, "user_id", USER_HEADER),
        _scope_id(values, request.headers, "agent_id", AGENT_HEADER),
    )


def _exact_scope(tenant: str, user_id: str | None, agent_id: str | None) -> Scope:
    if not user_id and not agent_id:
        raise ApiError(400, "A user_id or an agent_id is required.", param="user_id",
                       code="missing_required_parameter")  # fmt: skip
    return Scope(tenant, user_id or "", agent_id or "")


def _int_param(raw: object, param: str, default: int, low: int, high: int, *, in_query: bool = False) -> int:
    """An integer in [low, high]; query strings are parsed, JSON bodies must hold a number."""
    if raw is None:
        return default
    value: object = raw
    if in_query and isinstance(raw, str):
        try:
            value = int(raw.strip())
        except ValueError:
            raise bad_param(param, f"'{param}' must be an integer.") from None
    if not isinstance(value, int) or isinstance(value, bool):
        raise bad_param(param, f"'{param}' must be an integer.")
    if not low <= value <= high:
        raise bad_param(param, f"'{param}' must be between {low} and {high}.", code="invalid_value")
    return value


def _flag(raw: str | None, param: str) -> bool | None:
    """A query-string boolean: ``true``/``false``; absent or empty is ``None`` (no filter)."""
    if not raw:
        return None
    if raw not in ("true", "false"):
        raise bad_param(param, f"'{param}' must be true or false.", code="invalid_value")
    return raw == "true"


def _expires(body: Mapping[str, Any]) -> Any:
    """UNSET when absent (PATCH: keep), None when null (clear), else epoch seconds."""
    if "expires_at" not in body:
        return UNSET
    return parse_time(body["expires_at"], "expires_at")


def _duplicate(exc: DuplicateMemory) -> ApiError:
    return ApiError(
        409,
        f"An identical memory already exists in this scope: {exc.existing_id}",
        param="text",
        code="duplicate_memory",
        headers={EXISTING_ID: exc.existing_id},
    )


async def _body(request: Request, services: ServicesDep) -> dict[str, Any]:
    return await read_json_object(request, services.settings.server.max_body_bytes)


# --- create / list / search ------------------------------------------------------------


@router.post("/v1/memories", dependencies=[_NO_QUERY])
async def create_memory(request: Request, credential: CredentialDep, services: ServicesDep) -> Response:
    body = await _body(request, services)
    _reject_unknown(body, _CREATE_FIELDS)
    user_id, agent_id = _ids(body, request)
    scope = _exact_scope(credential.tenant, user_id, agent_id)
    session_id = _scope_id(body, request.headers, "session_id", SESSION_HEADER) or ""
    if "messages" in body:
        if "text" in body:
            raise bad_param("messages", "Send either 'text' or 'messages', not both.", code="invalid_value")
        job_id = await services.capture.enqueue_messages(scope, session_id, _turn_messages(body["messages"]))
        return JSONResponse(
            {"job_id": job_id, "object": "memproxy.job", "status": "pending"}, status_code=202
        )
    text = optional_text(body, "text")
    if text is None:
        raise bad_param(
            "text", "Missing required parameter: 'text' (or 'messages').", code="missing_required_parameter"
        )
    expires_at = _expires(body)
    try:
        memory = await services.store.add(
            scope, text, session_id=session_id, metadata=optional_object(body, "metadata"),
            expires_at=None if expires_at is UNSET else expires_at, source="manual",
        )  # fmt: skip
    except DuplicateMemory as exc:
        raise _duplicate(exc) from None
    return JSONResponse(memory.to_api(), status_code=201)


def _turn_messages(raw: object) -> list[dict[str, Any]]:
    """Validate a conversation turn; keep user/assistant/tool messages as capture stores them."""
    if not isinstance(raw, list) or not raw:
        raise bad_param("messages", "'messages' must be a non-empty array.")
    turn: list[dict[str, Any]] = []
    for i, message in enumerate(raw):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise bad_param(f"messages[{i}]", f"messages[{i}] must be an object with a 'role'.")
        content = message.get("content")
        if content is not None and not isinstance(content, str | list):
            raise bad_param(f"messages[{i}].content", f"messages[{i}].content must be a string or an array.")
        if message["role"] in _TURN_ROLES:
            kept = {k: v for k, v in message.items() if k in ("name", "tool_call_id", "tool_calls") and v}
            turn.append({"role": message["role"], "content": content_text(content), **kept})
    if not turn:
        raise bad_param(
            "messages", "'messages' has no user, assistant or tool message.", code="invalid_value"
        )
    return turn


@router.get(
    "/v1/memories",
    dependencies=[allow_query("user_id", "agent_id", "limit", "cursor", "source", "has_expiry")],
)
async def list_memories(request: Request, credential: CredentialDep, services: ServicesDep) -> Response:
    query = request.query_params
    user_id, agent_id = _ids(query, request)
    limit = _int_param(query.get("limit"), "limit", DEFAULT_LIMIT, 1, MAX_LIMIT, in_query=True)
    cursor = query.get("cursor") or None
    source = query.get("source") or None
    if source is not None and source not in SOURCES:
        raise bad_param("source", f"'source' must be one of {', '.join(SOURCES)}.", code="invalid_value")
    page, next_cursor = await services.store.list_memories(
        credential.tenant, user_id, agent_id, limit=limit, cursor=cursor, source=source,
        has_expiry=_flag(query.get("has_expiry"), "has_expiry"),
    )  # fmt: skip
    return JSONResponse({"object": "list", "data": [m.to_api() for m in page], "next_cursor": next_cursor})


@router.post("/v1/memories/search", dependencies=[_NO_QUERY])
async def search_memories(request: Request, credential: CredentialDep, services: ServicesDep) -> Response:
    body = await _body(request, services)
    _reject_unknown(body, _SEARCH_FIELDS)
    query = body.get("query")
    if not isinstance(query, str) or not query.strip():
        raise bad_param("query", "'query' must be a non-empty string.")
    user_id, agent_id = _ids(body, request)
    scope = _exact_scope(credential.tenant, user_id, agent_id)
    top_k = _int_param(body.get("top_k"), "top_k", DEFAULT_TOP_K, 1, MAX_TOP_K)
    min_score = body.get("min_score", services.settings.recall.min_score)
    if not isinstance(min_score, int | float) or isinstance(min_score, bool):
        raise bad_param("min_score", "'min_score' must be a number.")
    found = await services.store.search(scope, query, top_k=top_k, min_score=float(min_score))
    data = [{**memory.to_api(), "score": round(score, 6)} for memory, score in found]
    return JSONResponse({"object": "list", "data": data})


# --- forget / export / import (fixed paths: before /{memory_id}) ------------------------


@router.delete("/v1/memories", dependencies=[_SCOPE_QUERY])
async def forget_scope(request: Request, credential: CredentialDep, services: ServicesDep) -> Response:
    user_id, agent_id = _ids(request.query_params, request)
    scope = _exact_scope(credential.tenant, user_id, agent_id)
    snapshot_files = int(await asyncio.to_thread(services.index.snapshot_path(scope.key).exists))
    counts = await services.store.forget_scope(scope)
    deleted = {
        "memories": counts.get("memories", 0),
        "history": counts.get("history", 0),
        "messages": counts.get("messages", 0),
        "jobs": counts.get("jobs", 0),
        # The vectors this process's index held for the scope (superseded ones included), not
        # the memory count: 0 when no search loaded it here. Other processes drop their copies
        # on the reset marker forget leaves (index.manager.drop_forgotten).
        "index_entries": counts.get("index_entries", 0),
        "snapshots": snapshot_files,
    }
    return JSONResponse({"object": "memproxy.forget", "user_id": scope.user_id, "agent_id": scope.agent_id,
                         "deleted": deleted})  # fmt: skip


@router.get("/v1/memories/export", dependencies=[_SCOPE_QUERY])
async def export_memories(request: Request, credential: CredentialDep, services: ServicesDep) -> Response:
    user_id, agent_id = _ids(request.query_params, request)
    items = await services.store.export(credential.tenant, user_id, agent_id)
    return Response(to_jsonl(items), media_type=NDJSON)


@router.post("/v1/memories/import", dependencies=[_NO_QUERY])
async def import_memories(request: Request, credential: CredentialDep, services: ServicesDep) -> Response:
    raw = await read_bytes(request, services.settings.server.max_body_bytes)
    items = parse_jsonl(raw)
    result = await services.store.import_(credential.tenant, items)
    return JSONResponse({"object": "memproxy.import", **result})


# --- one memory -------------------------------------------------------------------------


@router.get("/v1/memories/{memory_id}", dependencies=[_NO_QUERY])
async def get_memory(memory_id: str, credential: CredentialDep, services: ServicesDep) -> Response:
    memory = await services.store.get(credential.tenant, memory_id)
    return JSONResponse(memory.to_api())


@router.patch("/v1/memories/{memory_id}", dependencies=[_NO_QUERY])
async def patch_memory(
    memory_id: str, request: Request, credential: CredentialDep, services: ServicesDep
) -> Response:
    body = await _body(request, services)
    _reject_unknown(body, _PATCH_FIELDS)
    if not body:
        raise bad_param(
            "text", "Nothing to update: send text, metadata and/or expires_at.", code="invalid_value"
        )
    if "text" in body and body["text"] is None:
        raise bad_param("text", "'text' cannot be null.")
    if "metadata" in body and body["metadata"] is None:
        raise bad_param("metadata", "'metadata' cannot be null; send {} to clear it.")
    try:
        memory = await services.store.update(
            credential.tenant, memory_id, text=optional_text(body, "text"),
            metadata=optional_object(body, "metadata"), expires_at=_expires(body), source="manual",
        )  # fmt: skip
    except DuplicateMemory as exc:
        raise _duplicate(exc) from None
    return JSONResponse(memory.to_api())


@router.delete("/v1/memories/{memory_id}", dependencies=[_NO_QUERY])
async def delete_memory(memory_id: str, credential: CredentialDep, services: ServicesDep) -> Response:
    await services.store.delete(credential.tenant, memory_id, source="manual")
    return JSONResponse({"id": memory_id, "object": "memory.deleted", "deleted": True})


@router.get("/v1/memories/{memory_id}/history", dependencies=[_NO_QUERY])
async def memory_history(memory_id: str, credential: CredentialDep, services: ServicesDep) -> Response:
    events = await services.store.history(credential.tenant, memory_id)
    return JSONResponse({"object": "list", "data": events})
