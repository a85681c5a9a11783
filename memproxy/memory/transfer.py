"""Memories as JSON Lines: the export format, and validation of lines to import.

Invariants:
- An exported line is ``Memory.to_api()``; an import accepts exactly those fields and
  drops any other (a line's ``tenant`` included): the caller's tenant is the only one an
  import can write to.
- A bad line is a 400 naming the line; nothing of a file with a bad line is imported.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from memproxy import json_input
from memproxy.errors import ApiError
from memproxy.memory.rows import SOURCES
from memproxy.scope import validate_id
from memproxy.times import parse_time


def bad_param(param: str, message: str, code: str = "invalid_type") -> ApiError:
    return ApiError(400, message, param=param, code=code)


def optional_text(body: Mapping[str, Any], field: str) -> str | None:
    value = body.get(field)
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise bad_param(field, f"'{field}' must be a non-empty string.")
    return value


def optional_object(body: Mapping[str, Any], field: str) -> dict[str, Any] | None:
    value = body.get(field)
    if value is not None and not isinstance(value, dict):
        raise bad_param(field, f"'{field}' must be a JSON object.")
    return value


def to_jsonl(items: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(item, ensure_ascii=False).encode() + b"\n" for item in items)


def parse_jsonl(raw: bytes) -> list[dict[str, Any]]:
    """Exported lines → items for ``MemoryStore.import_``; a bad line is a 400 naming it.

    A line's ``tenant`` (or any field the store does not know) is dropped: the caller's
    tenant is the only one an import can write to.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise bad_param("body", f"The import is not UTF-8 text: {exc}", code="invalid_json") from None
    items = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            items.append(_import_item(line))
        except ApiError as exc:
            raise ApiError(400, f"line {number}: {exc.message}", param=f"line {number}",
                           code=exc.code or "invalid_line") from None  # fmt: skip
    return items


def _import_item(line: str) -> dict[str, Any]:
    raw = json_input.loads(line, prefix="not valid JSON: ")  # a 400, as for a request body
    if not isinstance(raw, dict):
        raise bad_param("line", "not a JSON object", code="invalid_json")
    text = optional_text(raw, "text")
    if text is None:
        raise bad_param("text", "'text' is required", code="missing_required_parameter")
    item: dict[str, Any] = {"text": text, "metadata": optional_object(raw, "metadata") or {}}
    for field in ("user_id", "agent_id", "session_id"):
        item[field] = validate_id(raw.get(field), field)
    if not item["user_id"] and not item["agent_id"]:
        raise bad_param("user_id", "a user_id or an agent_id is required", code="missing_required_parameter")
    if raw.get("id") is not None:
        if not isinstance(raw["id"], str) or not raw["id"].strip() or len(raw["id"]) > 128:
            raise bad_param("id", "'id' must be a non-empty string of at most 128 characters")
        item["id"] = raw["id"].strip()
    source = raw.get("source") or "manual"
    if source not in SOURCES:
        raise bad_param("source", f"'source' must be one of {', '.join(SOURCES)}", code="invalid_value")
    item["source"] = source
    for field in ("created_at", "updated_at", "expires_at"):
        parse_time(raw.get(field), field)  # validates; the store parses again
        item[field] = raw.get(field)
    return item
