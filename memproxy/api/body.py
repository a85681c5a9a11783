"""Reading a JSON request body within the size limit, with OpenAI-shaped errors."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from memproxy.errors import ApiError
from memproxy.wire import json_input


async def read_bytes(request: Request, max_bytes: int) -> bytes:
    """The raw body within ``max_bytes`` (413 beyond, checked while reading)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise _too_large(max_bytes)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise _too_large(max_bytes)
        chunks.append(chunk)
    return b"".join(chunks)


async def read_json_object(request: Request, max_bytes: int) -> dict[str, Any]:
    """The body as a JSON object; 413 past ``max_bytes`` (checked while reading), 400 if not JSON."""
    return parse_json_object(await read_bytes(request, max_bytes))


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """``raw`` as a JSON object, or a 400 saying why not (``json_input``: what every route reads)."""
    if not raw.strip():
        raise ApiError(400, "The request body is empty; expected a JSON object.", code="invalid_json")
    body = json_input.loads(raw)
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.", code="invalid_json")
    return body


def _too_large(max_bytes: int) -> ApiError:
    return ApiError(
        413, f"The request body exceeds the limit of {max_bytes} bytes.", code="request_too_large"
    )


def require_str(body: dict[str, Any], field: str) -> str:
    value = body.get(field)
    if value is None:
        raise ApiError(
            400, f"Missing required parameter: '{field}'.", param=field, code="missing_required_parameter"
        )
    if not isinstance(value, str) or not value:
        raise ApiError(400, f"'{field}' must be a non-empty string.", param=field, code="invalid_type")
    return value


def validate_chat_body(body: dict[str, Any]) -> None:
    """The checks OpenAI itself makes before anything is forwarded."""
    require_str(body, "model")
    messages = body.get("messages")
    if messages is None:
        raise ApiError(
            400,
            "Missing required parameter: 'messages'.",
            param="messages",
            code="missing_required_parameter",
        )
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages' must be a non-empty array.", param="messages", code="invalid_type")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ApiError(
                400,
                f"messages[{i}] must be an object with a 'role'.",
                param=f"messages[{i}]",
                code="invalid_type",
            )
    if "stream" in body and not isinstance(body["stream"], bool):
        raise ApiError(400, "'stream' must be a boolean.", param="stream", code="invalid_type")
