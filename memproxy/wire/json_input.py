"""JSON from a client, decoded so that what it yields can be stored, forwarded and answered.

Python's ``json`` accepts text that breaks later, far from the request: a lone UTF-16
surrogate (``"\\ud800"``) decodes to a ``str`` no encoder can write as UTF-8 (the database,
httpx and every JSON response then fail), ``NaN``/``Infinity``/``1e999`` are not JSON and
cannot be written back out, an integer over 4,300 digits and nesting about 1,000 deep raise
``ValueError`` / ``RecursionError``, and a few hundred levels are enough for LiteLLM's deep
copies to hit the recursion limit. ``loads`` refuses all of these up front with a 400
(``code: invalid_json``) naming what and where, so every route that reads JSON
(``api.body`` for request bodies, ``memory.transfer`` for each imported line) either gets
values that are safe everywhere or never starts.

The checks cost nothing on ordinary bodies: the nesting walk runs only when the text has
more brackets than the limit, the surrogate walk only when it holds a ``\\uD8xx``-``\\uDFxx``
escape (a surrogate pair from an ASCII-only encoder is one too, and passes).
"""

from __future__ import annotations

import json
import re
from typing import Any

from memproxy.errors import ApiError

# Deeper than any request a client sends (a tool's JSON schema ten levels deep is ~25), and
# shallow enough for every recursive walk on the way (deepcopy takes two frames a level).
MAX_DEPTH = 64
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


BODY = "The request body is not valid JSON: "


def loads(raw: bytes | str, *, prefix: str = BODY) -> Any:
    """``raw`` (UTF-8 JSON text) as Python values, or a 400 ``ApiError`` saying what is wrong.

    The error's message is ``prefix`` + the reason; its ``param`` names the string that holds
    a lone surrogate (``user``, ``messages[0].content``), else it is None as for any syntax error.
    """
    if isinstance(raw, bytes):
        try:
            # utf-8-sig: a leading BOM is ignored (RFC 8259 allows it); nothing else but UTF-8 is read.
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise _invalid(prefix, f"it is not UTF-8 text (byte {exc.start}).") from None
    else:
        text = raw
    try:
        value = _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        raise _invalid(prefix, f"{exc.msg} (line {exc.lineno}, column {exc.colno}).") from None
    except RecursionError:
        raise _too_deep(prefix) from None
    except ValueError as exc:
        # The hooks' refusals, and int()'s of a literal over sys.get_int_max_str_digits() (4,300).
        raise _invalid(prefix, f"{exc}".split(";")[0] + ".") from None
    if text.count("[") + text.count("{") > MAX_DEPTH and _deeper_than(value, MAX_DEPTH):
        raise _too_deep(prefix)
    if _SURROGATE_ESCAPE.search(text):
        found = _lone_surrogate(value)
        if found is not None:
            # I-JSON (RFC 7493) forbids them; no UTF-8 writer can store or forward one.
            where, param = found
            reason = f"{where} holds a lone UTF-16 surrogate (a \\uD800-\\uDFFF escape not in a pair)."
            raise _invalid(prefix, reason, param=param)
    return value


class _Rejected(ValueError):
    """Raised inside ``json.loads`` by the hooks; becomes the 400's message."""


def _no_constant(name: str) -> Any:
    raise _Rejected(f"{name} is not a JSON value")


def _finite_float(literal: str) -> float:
    value = float(literal)
    if value in (float("inf"), float("-inf")):
        raise _Rejected(f"the number {literal[:40]} is out of range")
    return value


def _deeper_than(value: Any, limit: int) -> bool:
    # Level by level, iteratively (a recursive walk is what this check protects), so the
    # per-element work is C's list.extend and one type test: ~10 us for a 100-message chat.
    level = [value]
    for _ in range(limit):
        children: list[Any] = []
        for item in level:
            children.extend(item.values() if type(item) is dict else item)
        level = [child for child in children if type(child) is dict or type(child) is list]
        if not level:
            return False
    return True


def _lone_surrogate(value: Any) -> tuple[str, str | None] | None:
    """Where the first string or key that is not UTF-8-encodable is: (description, param).

    The param is the string's path (``messages[0].content``); the text itself is never quoted,
    since an error message holding the surrogate could not be sent either.
    """
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            if not _encodable(item):
                return (f"'{path[:200]}'" if path else "the value"), path[:200] or None
        elif isinstance(item, dict):
            for key, child in item.items():
                if not _encodable(key):
                    return (f"a key in '{path[:200]}'" if path else "a key"), path[:200] or None
                stack.append((child, f"{path}.{key}" if path else key))
        elif isinstance(item, list):
            stack.extend((child, f"{path}[{i}]") for i, child in enumerate(item))
    return None


# One decoder for every call (json.loads with hooks builds a new one each time).
_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite_float)


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _invalid(prefix: str, reason: str, *, param: str | None = None) -> ApiError:
    return ApiError(400, prefix + reason, param=param, code="invalid_json")


def _too_deep(prefix: str) -> ApiError:
    return _invalid(prefix, f"it is nested deeper than {MAX_DEPTH} levels.")
