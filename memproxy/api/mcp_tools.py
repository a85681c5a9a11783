"""The MCP tools: their names, argument schemas and annotations, and their calls into
``memory.management`` (the operations the REST routes call too).

Invariants:
- A tool's arguments are checked against its ``inputSchema`` before anything runs (JSON
  Schema 2020-12; unknown arguments are refused), then the operation validates them as it
  does for REST, so a door cannot accept what the other refuses.
- Every refusal, the schema's or an operation's (guards, not found, duplicates), is a tool
  result with ``isError`` and a message saying what to do next; an unknown tool name is the
  protocol's "invalid params" error. Nothing here lets an exception end the session.
- ``readOnlyHint`` / ``destructiveHint`` are honest: a tool that replaces or erases stored
  text is destructive (``update_memory``, ``delete_memory``, ``forget_scope``); a tool that
  only adds is not.
- A successful result carries the REST answer's JSON object as ``structuredContent`` and the
  same JSON as its text content (for hosts that show text only).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema
import mcp_types as types

from memproxy.errors import ApiError
from memproxy.memory.management import (
    DEFAULT_TOP_K,
    MAX_LIMIT,
    MAX_TOP_K,
    Caller,
    MemoryManagement,
)
from memproxy.memory.rows import SOURCES
from memproxy.scope import MAX_ID_BYTES

# What a page of list_memories holds when the agent gives no limit: fewer than REST's 100,
# since every memory of the page lands in the model's context.
DEFAULT_PAGE = 20
# A conversation's messages per remember_conversation call.
MAX_MESSAGES = 200

_ID = {"type": "string", "minLength": 1, "maxLength": MAX_ID_BYTES}
_SCOPE_ARGS: dict[str, Any] = {
    "user_id": {
        **_ID,
        "description": "Whose memory: defaults to the X-Memproxy-User-Id header of this server's "
        "configuration; when that header is set, only the same value is accepted.",
    },
    "agent_id": {
        **_ID,
        "description": "Which agent's memory: defaults to the X-Memproxy-Agent-Id header; when that "
        "header is set, only the same value is accepted.",
    },
}
_SESSION_ARG = {
    "session_id": {
        **_ID,
        "description": "Recorded with the memory; defaults to the X-Memproxy-Session-Id header.",
    }
}
_MEMORY_ID = {
    "id": {
        "type": "string",
        "minLength": 1,
        "maxLength": 64,
        "description": "A memory id, as search_memories and list_memories return it.",
    }
}
_EXPIRES = {
    "expires_at": {
        "type": ["string", "number", "null"],
        "description": "When the memory stops being recalled: ISO-8601 (e.g. 2026-12-31T00:00:00Z) or "
        "epoch seconds; null for never.",
    }
}
_METADATA = {"metadata": {"type": "object", "description": "Any JSON object, stored and returned as is."}}


def _schema(properties: Mapping[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": dict(properties),
        "required": list(required),
        "additionalProperties": False,
    }


def _hints(*, read_only: bool, destructive: bool = False, idempotent: bool = False) -> types.ToolAnnotations:
    # Every tool acts on memproxy's own store only: not open-world.
    return types.ToolAnnotations(
        read_only_hint=read_only,
        destructive_hint=destructive,
        idempotent_hint=idempotent,
        open_world_hint=False,
    )


Run = Callable[[MemoryManagement, Caller, dict[str, Any]], Awaitable[dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class ToolSpec:
    tool: types.Tool
    run: Run
    validator: Any


def _tool(
    name: str, description: str, schema: dict[str, Any], hints: types.ToolAnnotations, run: Run
) -> ToolSpec:
    jsonschema.Draft202012Validator.check_schema(schema)
    tool = types.Tool(name=name, description=description, input_schema=schema, annotations=hints)
    return ToolSpec(tool, run, jsonschema.Draft202012Validator(schema))


# --- the calls ----------------------------------------------------------------------------


async def _search(ops: MemoryManagement, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    return await ops.search(caller, args)


async def _add(ops: MemoryManagement, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    return (await ops.create(caller, args)).body


async def _remember(ops: MemoryManagement, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    return (await ops.create(caller, args)).body


async def _list(ops: MemoryManagement, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    return await ops.list(caller, {"limit": DEFAULT_PAGE, **args})


async def _get(ops: MemoryManagement, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    return await ops.get(caller, args["id"])


async def _update(ops: MemoryManagement, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    changes = {key: value for key, value in args.items() if key != "id"}
    return await ops.update(caller, args["id"], changes)


async def _delete(ops: MemoryManagement, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    return await ops.delete(caller, args["id"])


async def _history(ops: MemoryManagement, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    return await ops.history(caller, args["id"])


async def _forget(ops: MemoryManagement, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    return await ops.forget(caller, {key: value for key, value in args.items() if key != "confirm"})


def build_tools(max_chars: int) -> dict[str, ToolSpec]:
    """The tools, by name; ``max_chars`` is ``memory.max_chars`` (the longest text a memory holds)."""
    text = {"type": "string", "minLength": 1, "maxLength": max_chars}
    message = {
        "type": "object",
        "properties": {
            "role": {
                "type": "string",
                "enum": ["user", "assistant", "system", "developer", "tool", "function"],
            },
            "content": {"type": ["string", "array", "null"]},
        },
        "required": ["role"],
    }
    specs = [
        _tool(
            "search_memories",
            "Search the memories of this user/agent for what is relevant to a query (hybrid: meaning "
            "and words). Returns the best matches first, each with id, text, score (0-1) and dates.",
            _schema(
                {
                    "query": {"type": "string", "minLength": 1, "maxLength": 16_000},
                    "top_k": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_TOP_K,
                        "default": DEFAULT_TOP_K,
                    },
                    "min_score": {
                        "type": "number",
                        "minimum": 0,
                        "maximum": 1,
                        "description": "Leave out matches scoring below this (default: the "
                        "server's recall.min_score).",
                    },
                    **_SCOPE_ARGS,
                },
                ("query",),
            ),
            _hints(read_only=True, idempotent=True),
            _search,
        ),
        _tool(
            "add_memory",
            f"Store one fact about the user (at most {max_chars} characters; one fact per memory). It is "
            "recalled in later conversations, through MCP and in the apps that call models through "
            "memproxy. Secrets (passwords, keys, card numbers) are refused.",
            _schema(
                {
                    "text": {**text, "description": "The fact, as a sentence."},
                    **_METADATA,
                    **_EXPIRES,
                    **_SCOPE_ARGS,
                    **_SESSION_ARG,
                },
                ("text",),
            ),
            _hints(read_only=False),
            _add,
        ),
        _tool(
            "remember_conversation",
            "Queue a conversation for memproxy's extraction model, which stores, updates or deletes "
            "memories from it as it would for a chat turn. Returns the job id; the memories appear once "
            "the job is done.",
            _schema(
                {
                    "messages": {"type": "array", "minItems": 1, "maxItems": MAX_MESSAGES, "items": message},
                    **_SCOPE_ARGS,
                    **_SESSION_ARG,
                },
                ("messages",),
            ),
            _hints(read_only=False),
            _remember,
        ),
        _tool(
            "list_memories",
            f"List stored memories, newest first, a page at a time (default {DEFAULT_PAGE}); pass the "
            "answer's next_cursor as cursor for the next page (null: no more).",
            _schema(
                {
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_PAGE},
                    "cursor": {"type": "string", "minLength": 1, "maxLength": 512},
                    "source": {"type": "string", "enum": list(SOURCES)},
                    "has_expiry": {"type": "boolean"},
                    **_SCOPE_ARGS,
                }
            ),
            _hints(read_only=True, idempotent=True),
            _list,
        ),
        _tool(
            "get_memory",
            "Read one memory by id.",
            _schema(_MEMORY_ID, ("id",)),
            _hints(read_only=True, idempotent=True),
            _get,
        ),
        _tool(
            "update_memory",
            "Change a memory's text (replacing it; the old text stays in its history), metadata ({} "
            "clears it) and/or expires_at.",
            _schema({**_MEMORY_ID, "text": text, **_METADATA, **_EXPIRES}, ("id",)),
            _hints(read_only=False, destructive=True, idempotent=True),
            _update,
        ),
        _tool(
            "delete_memory",
            "Delete one memory by id; it is no longer recalled anywhere.",
            _schema(_MEMORY_ID, ("id",)),
            _hints(read_only=False, destructive=True, idempotent=True),
            _delete,
        ),
        _tool(
            "memory_history",
            "Every change to a memory, oldest first: what it said before and after, when, and by whom "
            "(extracted from a conversation or manual).",
            _schema(_MEMORY_ID, ("id",)),
            _hints(read_only=True, idempotent=True),
            _history,
        ),
        _tool(
            "forget_scope",
            "Erase everything memproxy holds for this user/agent: all memories, their history, captured "
            "conversations and jobs. Cannot be undone; ask the user first, then pass confirm: true.",
            _schema(
                {"confirm": {"const": True, "description": "Must be true."}, **_SCOPE_ARGS}, ("confirm",)
            ),
            _hints(read_only=False, destructive=True, idempotent=True),
            _forget,
        ),
    ]
    return {spec.tool.name: spec for spec in specs}


# --- results ------------------------------------------------------------------------------


def success(body: dict[str, Any]) -> types.CallToolResult:
    text = json.dumps(body, ensure_ascii=False)
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], structured_content=body)


def refusal(message: str, error: dict[str, Any] | None = None) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=message)], is_error=True, structured_content=error
    )


def schema_refusal(name: str, spec: ToolSpec, args: dict[str, Any]) -> types.CallToolResult | None:
    """The first way ``args`` breaks ``name``'s input schema, as a tool error; None when they fit."""
    error = next(iter(sorted(spec.validator.iter_errors(args), key=lambda e: list(e.path))), None)
    if error is None:
        return None
    where = ".".join(str(part) for part in error.absolute_path)
    param = where or (error.validator_value[0] if error.validator == "required" else None)
    message = (
        f"Invalid arguments for {name}: {where + ': ' if where else ''}{error.message}. "
        f"The tool's inputSchema lists what it accepts."
    )
    return refusal(
        message,
        {
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "param": param,
                "code": "invalid_arguments",
            }
        },
    )


# What to do about a refusal, by its code (the message says what was wrong).
_NEXT_STEP = {
    "not_found": "Check the id: search_memories or list_memories show the ids of this scope.",
    "missing_required_parameter": "Set the X-Memproxy-User-Id (or -Agent-Id) header in this MCP server's "
    "configuration, or pass user_id.",
    "duplicate_memory": "It is already stored: use update_memory to change it.",
    "secret_refused": "Leave the secret out of the text.",
    "memory_too_long": "Store one short fact per memory: split the text.",
    "scope_pinned": "This connection's scope is set by its configuration.",
    "storage_unavailable": "Retry in a moment.",
}


def api_refusal(exc: ApiError) -> types.CallToolResult:
    """An operation's refusal (what REST answers with a 4xx) as a tool error an agent can act on."""
    step = _NEXT_STEP.get(str(exc.code), "")
    message = f"{exc.message}{' ' + step if step else ''} (status {exc.status}, code {exc.code})"
    return refusal(message, exc.body())
