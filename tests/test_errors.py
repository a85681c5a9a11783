"""Error bodies in OpenAI's shape and in Anthropic's, from one ``ApiError``."""

from __future__ import annotations

import json

import pytest
from starlette.responses import JSONResponse

from memproxy.errors import (
    ApiError,
    anthropic_error_body,
    error_body,
    error_type_for,
    not_found,
    render_error,
)


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (409, "conflict_error"),
        (413, "invalid_request_error"),
        (418, "invalid_request_error"),  # any other 4xx
        (429, "rate_limit_error"),
        (500, "server_error"),
        (502, "server_error"),
        (599, "server_error"),
    ],
)
def test_the_type_follows_the_status(status: int, kind: str) -> None:
    assert error_type_for(status) == kind
    assert ApiError(status, "m").body()["error"]["type"] == kind


def test_the_body_has_exactly_openais_four_fields() -> None:
    error = ApiError(400, "bad", param="messages[0]", code="invalid_type", headers={"Retry-After": "1"})
    assert error.body() == {
        "error": {
            "message": "bad",
            "type": "invalid_request_error",
            "param": "messages[0]",
            "code": "invalid_type",
        }
    }
    assert str(error) == "bad" and error.headers == {"Retry-After": "1"}
    assert ApiError(400, "x").headers == {} and ApiError(400, "x").body()["error"]["code"] is None
    assert error_body("m", status=502, type="upstream_error")["error"]["type"] == "upstream_error"


def test_not_found_is_one_answer_whatever_is_missing() -> None:
    assert not_found().body() == not_found("memory").body()
    assert not_found("job").body()["error"] == {
        "message": "No such job",
        "type": "not_found_error",
        "param": None,
        "code": "not_found",
    }


def test_render_error_writes_what_jsonresponse_writes() -> None:
    body = ApiError(431, "Header «x» too large", code="headers_too_large").body()
    assert render_error(body) == JSONResponse(body).body
    assert json.loads(render_error(body)) == body
    assert "«x»".encode() in render_error(body)  # not \u-escaped
    with pytest.raises(ValueError):
        render_error({"error": {"message": float("nan")}})  # not JSON: refused, never written


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (ApiError(400, "m"), "invalid_request_error"),
        (ApiError(401, "m"), "authentication_error"),
        (ApiError(404, "m"), "not_found_error"),
        (ApiError(409, "m"), "invalid_request_error"),  # OpenAI's conflict_error is not Anthropic's
        (ApiError(429, "m"), "rate_limit_error"),
        (ApiError(500, "m"), "api_error"),
        (ApiError(502, "m", type="upstream_error"), "api_error"),
        (ApiError(504, "m"), "timeout_error"),
        (ApiError(529, "m"), "overloaded_error"),
        (ApiError(400, "m", type="overloaded_error"), "overloaded_error"),  # an Anthropic type is kept
        (ApiError(422, "m"), "invalid_request_error"),
    ],
)
def test_anthropics_shape_uses_only_anthropics_types(error: ApiError, kind: str) -> None:
    assert anthropic_error_body(error) == {"type": "error", "error": {"type": kind, "message": "m"}}


@pytest.mark.parametrize(("status", "kind"), [(413, "request_too_large"), (402, "billing_error")])
def test_a_status_anthropic_names_gets_anthropics_type(status: int, kind: str) -> None:
    assert anthropic_error_body(ApiError(status, "m"))["error"]["type"] == kind
