"""Memories as JSON Lines: the export format, and validation of lines to import.

Invariants:
- An exported line is ``Memory.to_api()``; an import accepts exactly those fields and
  drops any other (a line's ``tenant`` included): the caller's tenant is the only one an
  import can write to.
- A file with bad lines is refused whole (``ImportRefused``, a 400): every bad line is
  listed by its line number in the file (blank lines count; only ``\n`` ends a line, as
  JSON Lines says, so a text holding U+2028 or U+0085, which an export writes raw,
  stays one line), and nothing of it is imported.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from memproxy.errors import ApiError
from memproxy.memory.rows import SOURCES
from memproxy.scope import validate_id
from memproxy.wire import json_input
from memproxy.wire.times import parse_time


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


# A bad line: its number in the file, what is wrong, the error code.
LineProblem = tuple[int, str, str | None]
# Bad lines an error message lists before "and N more".
_LISTED = 20


class ImportRefused(ApiError):
    """Bad lines of an import, each ``(line number, message, code)``; nothing was imported."""

    def __init__(self, problems: list[LineProblem]) -> None:
        problems = sorted(problems, key=lambda problem: problem[0])
        self.problems = problems
        listed = "; ".join(f"line {n}: {message}" for n, message, _ in problems[:_LISTED])
        more = f"; and {len(problems) - _LISTED} more" if len(problems) > _LISTED else ""
        count = f"{len(problems)} bad lines, nothing imported: " if len(problems) > 1 else ""
        first, _, code = problems[0]
        super().__init__(400, f"{count}{listed}{more}", param=f"line {first}", code=code or "invalid_line")


def parse_jsonl(raw: bytes) -> list[dict[str, Any]]:
    """``read_jsonl``'s items; a file with lines it cannot read raises ``ImportRefused``
    listing every one."""
    items, problems = read_jsonl(raw)
    if problems:
        raise ImportRefused(problems)
    return items


def read_jsonl(raw: bytes) -> tuple[list[dict[str, Any]], list[LineProblem]]:
    """Exported lines → items for ``MemoryStore.import_``, each with its file ``line``
    number, and the lines that are not an item (``MemoryStore.import_(bad_lines=…)`` lists
    them with the texts it refuses, so one run names every bad line).

    A line's ``tenant`` (or any field the store does not know) is dropped: the caller's
    tenant is the only one an import can write to.
    """
    items: list[dict[str, Any]] = []
    problems: list[LineProblem] = []
    for number, data in enumerate(raw.split(b"\n"), start=1):
        try:
            line = data.decode("utf-8-sig")  # a BOM (an editor wrote it) is not a bad line
            if line.strip():
                items.append({**_import_item(line), "line": number})
        except UnicodeDecodeError as exc:
            problems.append((number, f"not UTF-8 text (byte {exc.start})", "invalid_json"))
        except ApiError as exc:
            problems.append((number, exc.message, None if exc.code is None else str(exc.code)))
    return items, problems


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
