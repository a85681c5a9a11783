"""Reading the extractor's answer: operations to apply, and operations rejected with a reason.

The parser is tolerant per operation, strict per answer. Chosen from the recorded
small-model answers (``tests/data/small-models.jsonl``): most answers mix good operations
with bad ones (an ADD that copies an existing memory, an UPDATE of an id that does not
exist, a NONE with a text). Rejecting the whole answer loses the good ones, and a retry at
temperature 0 returns the same answer, so the job ends ``dead`` with nothing stored.

Invariants:
- An answer that is not a JSON object with an ``operations`` list (prose, JSON cut off by
  ``max_tokens``), or whose operations are *all* invalid, raises ``ExtractionError``:
  a failed attempt, retried with the error as feedback. Never "no memories".
- Otherwise every valid operation is returned and every invalid one is returned as a
  ``Rejected`` with its reason, which the worker records on the job and counts; no
  operation vanishes silently.
- Local ids (``m1`` …) are mapped back to memory ids here; callers only see real ids.
  An id used by two operations keeps its first use; the second is rejected.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

OPS = ("ADD", "UPDATE", "DELETE", "NONE")
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


class ExtractionError(Exception):
    """The extractor's answer is unusable; the attempt failed and will be retried."""

    def __init__(self, message: str, usage: tuple[int, int] = (0, 0)) -> None:
        super().__init__(message)
        self.usage = usage  # (prompt, completion) tokens spent on the failed attempt


@dataclass(frozen=True, slots=True)
class Operation:
    op: str
    text: str | None = None
    memory_id: str | None = None  # the real id, for UPDATE and DELETE
    local_id: str | None = None  # the id the model used ("m1"), for reports


@dataclass(frozen=True, slots=True)
class Rejected:
    """An operation that was not applied, and why (reason from ``memory.guards.REASONS``)."""

    index: int
    op: str
    reason: str
    detail: str
    local_id: str | None = None

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "index": self.index,
            "op": self.op,
            "reason": self.reason,
            "detail": self.detail,
        }
        if self.local_id is not None:
            out["id"] = self.local_id
        return out


@dataclass
class Parsed:
    operations: list[Operation] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)


class _Invalid(Exception):
    pass


def _decode(raw: str | None, cut_off: bool) -> list[Any]:
    text = (raw or "").strip()
    fenced = _FENCE.match(text)
    try:
        data = json.loads(fenced.group(1) if fenced else text)
    except ValueError as exc:
        if cut_off:
            raise ExtractionError(
                f"extractor answer was cut off at the token limit and is not valid JSON ({exc}); "
                "it probably repeated itself: keep every text to one short sentence"
            ) from None
        raise ExtractionError(f"extractor answer is not JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("operations"), list):
        raise ExtractionError('extractor answer must be an object with an "operations" list')
    operations: list[Any] = data["operations"]
    return operations


def _text(item: dict[str, Any]) -> str:
    text = item.get("text")
    if not isinstance(text, str) or not text.strip():
        raise _Invalid(f"{item.get('op')} needs a non-empty text")
    return text.strip()


def _target(item: dict[str, Any], ids: dict[str, str], used: set[str]) -> str:
    local = item.get("id")
    if not isinstance(local, str) or local not in ids:
        known = ", ".join(ids) or "none: existing_memories is empty"
        raise _Invalid(f"unknown memory id {local!r} (known ids: {known})")
    if local in used:
        raise _Invalid(f"memory id {local!r} used twice")
    used.add(local)
    return ids[local]


def _operation(item: object, ids: dict[str, str], used: set[str]) -> Operation | None:
    if not isinstance(item, dict):
        raise _Invalid("operation is not an object")
    op = str(item.get("op") or item.get("event") or "").upper()
    local = item.get("id") if isinstance(item.get("id"), str) else None
    if op == "ADD":
        return Operation("ADD", text=_text(item))
    if op == "UPDATE":
        return Operation("UPDATE", memory_id=_target(item, ids, used), text=_text(item), local_id=local)
    if op == "DELETE":
        return Operation("DELETE", memory_id=_target(item, ids, used), local_id=local)
    if op == "NONE":
        return None
    raise _Invalid(f"unknown op {item.get('op')!r}")


def parse_answer(raw: str | None, ids: dict[str, str], *, cut_off: bool = False) -> Parsed:
    """Valid operations and rejected ones (see the module doc). NONE ops are dropped."""
    items = _decode(raw, cut_off)
    parsed, used = Parsed(), set[str]()
    for n, item in enumerate(items):
        try:
            operation = _operation(item, ids, used)
        except _Invalid as exc:
            op = str(item.get("op") or "?").upper() if isinstance(item, dict) else "?"
            local = item.get("id") if isinstance(item, dict) and isinstance(item.get("id"), str) else None
            parsed.rejected.append(Rejected(n, op, "invalid", str(exc), local))
            continue
        if operation is not None:
            parsed.operations.append(operation)
    if parsed.rejected and not parsed.operations:
        problems = "; ".join(f"operation {r.index}: {r.detail}" for r in parsed.rejected[:5])
        raise ExtractionError(f"no usable operation in the extractor answer: {problems}")
    return parsed
