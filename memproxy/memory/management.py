"""The memory-management operations every door calls: the REST routes (``api.memories``), the
console (through them) and the MCP tools (``api.mcp``).

A door only translates its wire format to these calls and their answers back (HTTP status
and JSON; an MCP tool result), so scope resolution, validation, guards and history cannot
drift between doors. Answers are the contract's JSON objects; refusals are ``ApiError``
(OpenAI-shaped fields, the status a REST route answers with).

Invariants:
- The tenant is always ``Caller.tenant`` (from the credential); no argument or header can
  name another. Another tenant's memory id is answered exactly like a missing one.
- A scope id comes from the arguments (a body, a query string, a tool's arguments) and, when
  absent there, from the ``X-Memproxy-User-Id`` / ``-Agent-Id`` / ``-Session-Id`` headers.
  A *pinned* caller (MCP: the host set the headers once for a connection that a model
  drives) may add an id the headers leave open, never replace one they set; and a memory
  addressed by id must lie inside the ids its headers set, else it is "not found".
- Selection: *create*, *search* and *forget* act on one exact scope and need a user or an
  agent id; *list* and *export* treat an absent id as "any" (an empty one as exactly "").
- Unknown arguments are a 400 naming them, never silently ignored.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from memproxy.errors import ApiError, not_found
from memproxy.index.manager import IndexManager
from memproxy.memory.rows import SOURCES, UNSET, DuplicateMemory, Memory
from memproxy.memory.store import MemoryStore
from memproxy.memory.transfer import bad_param, optional_object, optional_text, parse_jsonl, to_jsonl
from memproxy.scope import AGENT_HEADER, SESSION_HEADER, USER_HEADER, Scope, header_id, validate_id
from memproxy.wire.headers import EXISTING_ID, display_name
from memproxy.wire.message_text import content_text
from memproxy.wire.times import parse_time

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
DEFAULT_TOP_K = 10
MAX_TOP_K = 100

CREATE_FIELDS = frozenset({"user_id", "agent_id", "session_id", "text", "messages", "metadata", "expires_at"})
PATCH_FIELDS = frozenset({"text", "metadata", "expires_at"})
SEARCH_FIELDS = frozenset({"query", "user_id", "agent_id", "top_k", "min_score"})
# Roles a queued turn keeps: what capture keeps (outbox.capture.CAPTURED_ROLES, which this
# layer may not import) plus the assistant's answer; system/developer prompts are not facts.
# tests/memory/test_management.py checks the two agree.
TURN_ROLES = frozenset({"assistant", "user", "tool", "function"})
_SCOPE_FIELDS = (("user_id", USER_HEADER), ("agent_id", AGENT_HEADER))


class TurnQueue(Protocol):
    """Where a conversation goes to be extracted (``outbox.capture.Capture``)."""

    async def enqueue_messages(
        self, scope: Scope, session_id: str, messages: list[dict[str, Any]]
    ) -> str: ...


@dataclass(frozen=True, slots=True)
class Caller:
    """Who asks: the credential's tenant, the request's headers, and whether they pin the scope."""

    tenant: str
    headers: Mapping[str, str]
    pinned: bool = False


@dataclass(frozen=True, slots=True)
class Created:
    """What a create answers: a memory (``status`` 201) or a queued extraction job (202)."""

    status: int
    body: dict[str, Any]


# --- argument parsing ---------------------------------------------------------------------


def reject_unknown(args: Mapping[str, Any], allowed: frozenset[str]) -> None:
    for name in args:
        if name not in allowed:
            raise bad_param(name, f"Unknown parameter: '{name}'.", code="unknown_parameter")


def scope_id(caller: Caller, args: Mapping[str, Any], field: str, header: str) -> str | None:
    """``args[field]`` if given, else the header; None when neither is there."""
    if args.get(field) is not None:
        value = validate_id(args[field], field)
        pinned_value = _header_value(caller, header) if caller.pinned else None
        if pinned_value and value != pinned_value:
            raise ApiError(403, f"This connection is pinned to {field} '{pinned_value}' by its "
                           f"{display_name(header)} "
                           f"header; omit '{field}' or pass that value.", param=field,
                           code="scope_pinned")  # fmt: skip
        return value
    return _header_value(caller, header)


def _header_value(caller: Caller, header: str) -> str | None:
    return header_id(caller.headers[header], header) if header in caller.headers else None


def scope_ids(caller: Caller, args: Mapping[str, Any]) -> tuple[str | None, str | None]:
    user_id, agent_id = (scope_id(caller, args, field, header) for field, header in _SCOPE_FIELDS)
    return user_id, agent_id


def exact_scope(tenant: str, user_id: str | None, agent_id: str | None) -> Scope:
    if not user_id and not agent_id:
        raise ApiError(400, "A user_id or an agent_id is required.", param="user_id",
                       code="missing_required_parameter")  # fmt: skip
    return Scope(tenant, user_id or "", agent_id or "")


def int_param(raw: object, param: str, default: int, low: int, high: int, *, in_query: bool = False) -> int:
    """An integer in [low, high]; query strings are parsed, JSON must hold a number."""
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


def flag(raw: object, param: str) -> bool | None:
    """A boolean filter: JSON ``true``/``false`` or the query strings ``"true"``/``"false"``;
    absent or empty is ``None`` (no filter)."""
    if raw is None or raw == "":
        return None
    if isinstance(raw, bool):
        return raw
    if raw not in ("true", "false"):
        raise bad_param(param, f"'{param}' must be true or false.", code="invalid_value")
    return raw == "true"


def _expires(args: Mapping[str, Any]) -> Any:
    """UNSET when absent (update: keep), None when null (clear), else epoch seconds."""
    if "expires_at" not in args:
        return UNSET
    return parse_time(args["expires_at"], "expires_at")


def _duplicate(exc: DuplicateMemory) -> ApiError:
    return ApiError(
        409,
        f"An identical memory already exists in this scope: {exc.existing_id}",
        param="text",
        code="duplicate_memory",
        headers={EXISTING_ID: exc.existing_id},
    )


def turn_messages(raw: object) -> list[dict[str, Any]]:
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
        if message["role"] in TURN_ROLES:
            kept = {k: v for k, v in message.items() if k in ("name", "tool_call_id", "tool_calls") and v}
            turn.append({"role": message["role"], "content": content_text(content), **kept})
    if not turn:
        raise bad_param(
            "messages", "'messages' has no user, assistant or tool message.", code="invalid_value"
        )
    return turn


# --- the operations -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemoryManagement:
    """The operations, over the running store, extraction queue and index."""

    store: MemoryStore
    turns: TurnQueue
    index: IndexManager
    # A search's ``min_score`` when the caller gives none (``recall.min_score``).
    default_min_score: float

    async def create(self, caller: Caller, args: Mapping[str, Any]) -> Created:
        """One memory from ``text``, or a conversation (``messages``) queued for extraction."""
        reject_unknown(args, CREATE_FIELDS)
        user_id, agent_id = scope_ids(caller, args)
        scope = exact_scope(caller.tenant, user_id, agent_id)
        session_id = scope_id(caller, args, "session_id", SESSION_HEADER) or ""
        if "messages" in args:
            if "text" in args:
                raise bad_param(
                    "messages", "Send either 'text' or 'messages', not both.", code="invalid_value"
                )
            job_id = await self.turns.enqueue_messages(scope, session_id, turn_messages(args["messages"]))
            return Created(202, {"job_id": job_id, "object": "memproxy.job", "status": "pending"})
        text = optional_text(args, "text")
        if text is None:
            raise bad_param(
                "text",
                "Missing required parameter: 'text' (or 'messages').",
                code="missing_required_parameter",
            )
        expires_at = _expires(args)
        try:
            memory = await self.store.add(
                scope, text, session_id=session_id, metadata=optional_object(args, "metadata"),
                expires_at=None if expires_at is UNSET else expires_at, source="manual",
            )  # fmt: skip
        except DuplicateMemory as exc:
            raise _duplicate(exc) from None
        return Created(201, memory.to_api())

    async def list(
        self, caller: Caller, args: Mapping[str, Any], *, in_query: bool = False
    ) -> dict[str, Any]:
        """A page of the tenant's memories (absent ids: any), newest first, and the next cursor."""
        user_id, agent_id = scope_ids(caller, args)
        limit = int_param(args.get("limit"), "limit", DEFAULT_LIMIT, 1, MAX_LIMIT, in_query=in_query)
        cursor = args.get("cursor") or None
        if cursor is not None and not isinstance(cursor, str):
            raise bad_param("cursor", "'cursor' must be a string.")
        source = args.get("source") or None
        if source is not None and source not in SOURCES:
            raise bad_param("source", f"'source' must be one of {', '.join(SOURCES)}.", code="invalid_value")
        page, next_cursor = await self.store.list_memories(
            caller.tenant, user_id, agent_id, limit=limit, cursor=cursor, source=source,
            has_expiry=flag(args.get("has_expiry"), "has_expiry"),
        )  # fmt: skip
        return {"object": "list", "data": [m.to_api() for m in page], "next_cursor": next_cursor}

    async def search(self, caller: Caller, args: Mapping[str, Any]) -> dict[str, Any]:
        reject_unknown(args, SEARCH_FIELDS)
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            raise bad_param("query", "'query' must be a non-empty string.")
        user_id, agent_id = scope_ids(caller, args)
        scope = exact_scope(caller.tenant, user_id, agent_id)
        top_k = int_param(args.get("top_k"), "top_k", DEFAULT_TOP_K, 1, MAX_TOP_K)
        min_score = args.get("min_score", self.default_min_score)
        if not isinstance(min_score, int | float) or isinstance(min_score, bool):
            raise bad_param("min_score", "'min_score' must be a number.")
        found = await self.store.search(scope, query, top_k=top_k, min_score=float(min_score))
        return {
            "object": "list",
            "data": [{**memory.to_api(), "score": round(score, 6)} for memory, score in found],
        }

    async def forget(self, caller: Caller, args: Mapping[str, Any]) -> dict[str, Any]:
        """Erase one exact scope: memories, history, captured messages, jobs, index, snapshot."""
        scope = exact_scope(caller.tenant, *scope_ids(caller, args))
        snapshot_files = int(await asyncio.to_thread(self.index.snapshot_path(scope.key).exists))
        counts = await self.store.forget_scope(scope)
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
        return {"object": "memproxy.forget", "user_id": scope.user_id, "agent_id": scope.agent_id,
                "deleted": deleted}  # fmt: skip

    async def export(self, caller: Caller, args: Mapping[str, Any]) -> bytes:
        user_id, agent_id = scope_ids(caller, args)
        return to_jsonl(await self.store.export(caller.tenant, user_id, agent_id))

    async def import_(self, caller: Caller, raw: bytes) -> dict[str, Any]:
        result = await self.store.import_(caller.tenant, parse_jsonl(raw))
        return {"object": "memproxy.import", **result}

    async def _one(self, caller: Caller, memory_id: object) -> Memory:
        """The caller's memory ``memory_id``; outside its tenant or pinned ids: not found."""
        if not isinstance(memory_id, str) or not memory_id:
            raise bad_param("id", "'id' must be a non-empty string.")
        memory = await self.store.get(caller.tenant, memory_id)
        if caller.pinned:
            for field, header in _SCOPE_FIELDS:
                pinned = _header_value(caller, header)
                if pinned and getattr(memory, field) != pinned:
                    raise not_found()
        return memory

    async def get(self, caller: Caller, memory_id: str) -> dict[str, Any]:
        return (await self._one(caller, memory_id)).to_api()

    async def update(self, caller: Caller, memory_id: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """Change a memory's text (re-embedded, guarded), metadata and/or expiry; history records it."""
        reject_unknown(args, PATCH_FIELDS)
        if not args:
            raise bad_param(
                "text", "Nothing to update: send text, metadata and/or expires_at.", code="invalid_value"
            )
        if "text" in args and args["text"] is None:
            raise bad_param("text", "'text' cannot be null.")
        if "metadata" in args and args["metadata"] is None:
            raise bad_param("metadata", "'metadata' cannot be null; send {} to clear it.")
        text, metadata, expires_at = (
            optional_text(args, "text"),
            optional_object(args, "metadata"),
            _expires(args),
        )
        if caller.pinned:
            await self._one(caller, memory_id)
        try:
            memory = await self.store.update(caller.tenant, memory_id, text=text, metadata=metadata,
                                             expires_at=expires_at, source="manual")  # fmt: skip
        except DuplicateMemory as exc:
            raise _duplicate(exc) from None
        return memory.to_api()

    async def delete(self, caller: Caller, memory_id: str) -> dict[str, Any]:
        if caller.pinned:
            await self._one(caller, memory_id)
        await self.store.delete(caller.tenant, memory_id, source="manual")
        return {"id": memory_id, "object": "memory.deleted", "deleted": True}

    async def history(self, caller: Caller, memory_id: str) -> dict[str, Any]:
        """Every change to a memory, oldest first (a deleted memory's too, unless pinned)."""
        if caller.pinned:
            await self._one(caller, memory_id)
        return {"object": "list", "data": await self.store.history(caller.tenant, memory_id)}
