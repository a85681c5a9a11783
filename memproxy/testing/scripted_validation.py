"""The scripted upstream's request checks: what OpenAI's chat completions endpoint refuses.

A stand-in that answers 200 to ``role: "wizard"``, ``content: 42`` or ``temperature: "hot"``
hides a client's bug until it meets the real provider, so the fake refuses what OpenAI
refuses, with OpenAI's status (400), error shape, messages, ``param`` and ``code``:

- ``model`` and ``messages`` are required; ``messages`` is a non-empty array of objects.
- A message's ``role`` is one of OpenAI's; its ``content`` is text or an array of typed
  parts (required for system, developer and user; null allowed for an assistant with tool
  calls); a ``tool`` message names its ``tool_call_id``.
- The common sampling and shape parameters have OpenAI's types and ranges; ``null`` is
  accepted for any of them, as OpenAI does. Fields it does not know are not judged (the
  provider's surface grows; a stand-in that refused them would break newer clients).

Pure functions, no I/O: ``invalid_chat_request`` returns the 400 response or None.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

ROLES = ("system", "assistant", "user", "function", "tool", "developer")
_ROLE_LIST = "'system', 'assistant', 'user', 'function', 'tool', and 'developer'"
_CONTENT_REQUIRED = frozenset({"system", "developer", "user"})
# JSON type names as OpenAI's messages say them ("expected a decimal, but got a string").
_NUMBER, _INTEGER, _BOOLEAN, _STRING, _ARRAY, _OBJECT = (
    "a decimal", "an integer", "a boolean", "a string", "an array", "an object")  # fmt: skip
# parameter → (expected type, inclusive range or None)
_PARAMETERS: dict[str, tuple[str, tuple[float, float] | None]] = {
    "temperature": (_NUMBER, (0, 2)),
    "top_p": (_NUMBER, (0, 1)),
    "presence_penalty": (_NUMBER, (-2, 2)),
    "frequency_penalty": (_NUMBER, (-2, 2)),
    "n": (_INTEGER, (1, 128)),
    "max_tokens": (_INTEGER, None),
    "max_completion_tokens": (_INTEGER, None),
    "seed": (_INTEGER, None),
    "top_logprobs": (_INTEGER, (0, 20)),
    "stream": (_BOOLEAN, None),
    "logprobs": (_BOOLEAN, None),
    "parallel_tool_calls": (_BOOLEAN, None),
    "store": (_BOOLEAN, None),
    "user": (_STRING, None),
    "tools": (_ARRAY, None),
    "stream_options": (_OBJECT, None),
    "response_format": (_OBJECT, None),
    "metadata": (_OBJECT, None),
    "logit_bias": (_OBJECT, None),
}


class Refusal(Exception):
    def __init__(self, message: str, param: str | None, code: str | None) -> None:
        super().__init__(message)
        self.param = param
        self.code = code

    def response(self) -> JSONResponse:
        error = {
            "message": str(self),
            "type": "invalid_request_error",
            "param": self.param,
            "code": self.code,
        }
        return JSONResponse({"error": error}, status_code=400)


def invalid_chat_request(body: Any) -> JSONResponse | None:
    """OpenAI's 400 for a chat completions body it would refuse, else None."""
    try:
        check_chat_request(body)
    except Refusal as refusal:
        return refusal.response()
    return None


def check_chat_request(body: Any) -> None:
    if not isinstance(body, dict):
        raise Refusal(f"Invalid type for request body: expected an object, but got {_kind(body)} instead.",
                      None, "invalid_type")  # fmt: skip
    if body.get("model") in (None, ""):
        # OpenAI's own wording for this one (no param, no code).
        raise Refusal("you must provide a model parameter", None, None)
    _expect("model", body["model"], _STRING)
    if "messages" not in body:
        raise Refusal("Missing required parameter: 'messages'.", "messages", "missing_required_parameter")
    messages = body["messages"]
    _expect("messages", messages, _ARRAY)
    if not messages:
        raise Refusal("Invalid 'messages': empty array. Expected an array with minimum length 1, but got an "
                      "empty array instead.", "messages", "empty_array")  # fmt: skip
    for index, message in enumerate(messages):
        _check_message(f"messages[{index}]", message)
    for name, (expected, bounds) in _PARAMETERS.items():
        value = body.get(name)
        if value is None:
            continue
        _expect(name, value, expected)
        if bounds is not None and not bounds[0] <= value <= bounds[1]:
            side, limit = ("below minimum", bounds[0]) if value < bounds[0] else ("above maximum", bounds[1])
            word = "decimal" if expected == _NUMBER else "integer"
            relation = ">=" if value < bounds[0] else "<="
            raise Refusal(f"Invalid '{name}': {word} {side} value. Expected a value {relation} {_num(limit)}, "
                          f"but got {_num(value)} instead.", name, f"{word}_{side.replace(' ', '_')}_value")  # fmt: skip
    stop = body.get("stop")
    if (
        stop is not None
        and not isinstance(stop, str)
        and not (isinstance(stop, list) and all(isinstance(s, str) for s in stop))
    ):
        raise Refusal(f"Invalid type for 'stop': expected one of a string or array of strings, but got "
                      f"{_kind(stop)} instead.", "stop", "invalid_type")  # fmt: skip


def _check_message(where: str, message: Any) -> None:
    _expect(where, message, _OBJECT)
    if "role" not in message:
        raise Refusal(
            f"Missing required parameter: '{where}.role'.", f"{where}.role", "missing_required_parameter"
        )
    role = message["role"]
    _expect(f"{where}.role", role, _STRING)
    if role not in ROLES:
        raise Refusal(f"Invalid value: '{role}'. Supported values are: {_ROLE_LIST}.", f"{where}.role",
                      "invalid_value")  # fmt: skip
    content = message.get("content")
    if content is None:
        if role in _CONTENT_REQUIRED or (role == "tool" and "content" not in message):
            raise Refusal(f"Missing required parameter: '{where}.content'.", f"{where}.content",
                          "missing_required_parameter")  # fmt: skip
    elif not isinstance(content, str | list):
        raise Refusal(f"Invalid type for '{where}.content': expected one of a string or array of objects, but "
                      f"got {_kind(content)} instead.", f"{where}.content", "invalid_type")  # fmt: skip
    elif isinstance(content, list):
        for index, part in enumerate(content):
            at = f"{where}.content[{index}]"
            _expect(at, part, _OBJECT)
            if not isinstance(part.get("type"), str):
                raise Refusal(
                    f"Missing required parameter: '{at}.type'.", f"{at}.type", "missing_required_parameter"
                )
    if role == "tool" and not isinstance(message.get("tool_call_id"), str):
        raise Refusal(f"Missing required parameter: '{where}.tool_call_id'.", f"{where}.tool_call_id",
                      "missing_required_parameter")  # fmt: skip


def _expect(where: str, value: Any, expected: str) -> None:
    ok = {
        _NUMBER: isinstance(value, int | float) and not isinstance(value, bool),
        _INTEGER: isinstance(value, int) and not isinstance(value, bool),
        _BOOLEAN: isinstance(value, bool),
        _STRING: isinstance(value, str),
        _ARRAY: isinstance(value, list),
        _OBJECT: isinstance(value, dict),
    }[expected]
    if not ok:
        raise Refusal(f"Invalid type for '{where}': expected {expected}, but got {_kind(value)} instead.",
                      where, "invalid_type")  # fmt: skip


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a decimal"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)
