"""Errors in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``.

Every error that leaves memproxy, ours or the provider's, goes through ``error_body``
so clients written against OpenAI keep working against us.
"""

from __future__ import annotations

import json
from typing import Any

_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    409: "conflict_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


def error_type_for(status: int) -> str:
    if status in _TYPE_BY_STATUS:
        return _TYPE_BY_STATUS[status]
    return "server_error" if status >= 500 else "invalid_request_error"


def error_body(
    message: str,
    *,
    status: int = 400,
    type: str | None = None,
    param: str | None = None,
    code: str | int | None = None,
) -> dict[str, Any]:
    return {
        "error": {
            "message": message,
            "type": type or error_type_for(status),
            "param": param,
            "code": code,
        }
    }


def render_error(body: dict[str, Any]) -> bytes:
    """An error body's bytes, exactly as Starlette's ``JSONResponse`` writes every other one,
    for answers written below the app (the 431 of ``api.serving``)."""
    return json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


class ApiError(Exception):
    """An error we answer with: a status and an OpenAI-shaped body."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str | None = None,
        param: str | None = None,
        code: str | int | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type or error_type_for(status)
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return error_body(self.message, status=self.status, type=self.type, param=self.param, code=self.code)


def not_found(what: str = "memory") -> ApiError:
    """The one answer for "does not exist" and "belongs to another tenant"."""
    return ApiError(404, f"No such {what}", code="not_found")


# Anthropic's error types (https://docs.anthropic.com/en/api/errors), by status.
_ANTHROPIC_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
    529: "overloaded_error",
}
_ANTHROPIC_TYPES = frozenset({*_ANTHROPIC_TYPE_BY_STATUS.values(), "api_error"})


def anthropic_error_body(error: ApiError) -> dict[str, Any]:
    """``error`` in Anthropic's shape: ``{"type": "error", "error": {"type", "message"}}``."""
    # A type chosen for this error wins; the default type of its status (an OpenAI name) does not.
    chosen = error.type in _ANTHROPIC_TYPES and error.type != error_type_for(error.status)
    kind = (
        (error.type if chosen else None)
        or _ANTHROPIC_TYPE_BY_STATUS.get(error.status)
        or (error.type if error.type in _ANTHROPIC_TYPES else None)
        or ("api_error" if error.status >= 500 else "invalid_request_error")
    )
    return {"type": "error", "error": {"type": kind, "message": error.message}}
