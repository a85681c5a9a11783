"""Reading a request body: the size limit while reading, a JSON object or a 400, chat's own checks.

The body comes from a Starlette ``Request`` over a small ASGI ``receive`` that counts what was
read, so the tests can tell a refusal before reading from one after it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette.requests import Request

from memproxy.api.body import parse_json_object, read_bytes, read_json_object, require_str, validate_chat_body
from memproxy.errors import ApiError


class Body:
    """An ASGI ``receive`` handing out ``chunks`` one message at a time."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = list(chunks)
        self.reads = 0

    async def __call__(self) -> dict[str, Any]:
        self.reads += 1
        chunk = self.chunks.pop(0) if self.chunks else b""
        return {"type": "http.request", "body": chunk, "more_body": bool(self.chunks)}


def request(body: Body, content_length: str | None = None) -> Request:
    headers = [] if content_length is None else [(b"content-length", content_length.encode())]
    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": headers}
    return Request(scope, body)


def read(body: Body, max_bytes: int, content_length: str | None = None) -> bytes:
    return asyncio.run(read_bytes(request(body, content_length), max_bytes))


def too_large(body: Body, max_bytes: int, content_length: str | None = None) -> ApiError:
    with pytest.raises(ApiError) as err:
        read(body, max_bytes, content_length)
    assert (err.value.status, err.value.code) == (413, "request_too_large")
    assert f"limit of {max_bytes} bytes" in err.value.message
    return err.value


def test_a_body_up_to_the_limit_is_read_whole() -> None:
    assert read(Body(b"ab", b"cd", b"e"), 5) == b"abcde"
    assert read(Body(b"abcde"), 5, content_length="5") == b"abcde"
    assert read(Body(), 0) == b""


def test_a_declared_length_over_the_limit_is_refused_before_reading() -> None:
    body = Body(b"x" * 10)
    too_large(body, 5, content_length="10")
    assert body.reads == 0


def test_a_body_over_the_limit_is_refused_while_reading() -> None:
    body = Body(b"abc", b"def", b"ghi", b"jkl")
    too_large(body, 5)
    assert body.reads == 2 and body.chunks == [b"ghi", b"jkl"]  # the rest is never read


def test_a_lying_or_odd_content_length_does_not_lift_the_limit() -> None:
    too_large(Body(b"x" * 10), 5, content_length="3")
    too_large(Body(b"x" * 10), 5, content_length="-1")
    too_large(Body(b"x" * 10), 5, content_length="ten")


def test_read_json_object_reads_then_parses() -> None:
    assert asyncio.run(read_json_object(request(Body(b'{"a":', b" 1}")), 100)) == {"a": 1}
    with pytest.raises(ApiError) as err:
        asyncio.run(read_json_object(request(Body(b"[1, 2]")), 100))
    assert err.value.status == 400


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"", "The request body is empty; expected a JSON object."),
        (b" \n\t", "The request body is empty; expected a JSON object."),
        (b"[]", "The request body must be a JSON object."),
        (b'"text"', "The request body must be a JSON object."),
        (b"null", "The request body must be a JSON object."),
        (b"{nope", "The request body is not valid JSON: "),
        (b'{"t": NaN}', "The request body is not valid JSON: NaN is not a JSON value."),
    ],
)
def test_a_body_that_is_not_a_json_object_is_a_400(raw: bytes, message: str) -> None:
    with pytest.raises(ApiError) as err:
        parse_json_object(raw)
    assert (err.value.status, err.value.code) == (400, "invalid_json")
    assert err.value.message.startswith(message)


def test_require_str() -> None:
    assert require_str({"model": "m"}, "model") == "m"
    for body, code in (({}, "missing_required_parameter"), ({"model": None}, "missing_required_parameter"),
                       ({"model": ""}, "invalid_type"), ({"model": 4}, "invalid_type")):  # fmt: skip
        with pytest.raises(ApiError) as err:
            require_str(body, "model")
        assert (err.value.param, err.value.code) == ("model", code)


GOOD = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(
    ("change", "param", "code"),
    [
        ({"model": None}, "model", "missing_required_parameter"),
        ({"messages": None}, "messages", "missing_required_parameter"),
        ({"messages": []}, "messages", "invalid_type"),
        ({"messages": {"role": "user"}}, "messages", "invalid_type"),
        ({"messages": [{"role": "user"}, "hi"]}, "messages[1]", "invalid_type"),
        ({"messages": [{"content": "no role"}]}, "messages[0]", "invalid_type"),
        ({"messages": [{"role": 1}]}, "messages[0]", "invalid_type"),
        ({"stream": "true"}, "stream", "invalid_type"),
        ({"stream": 1}, "stream", "invalid_type"),
        ({"stream": None}, "stream", "invalid_type"),
    ],
)
def test_a_chat_body_openai_would_refuse_is_a_400_naming_the_param(
    change: dict[str, Any], param: str, code: str
) -> None:
    body = {**GOOD, **change}
    body = {k: v for k, v in body.items() if not (v is None and k in ("model", "messages"))}
    with pytest.raises(ApiError) as err:
        validate_chat_body(body)
    assert (err.value.status, err.value.param, err.value.code) == (400, param, code)


def test_a_good_chat_body_passes_untouched() -> None:
    body = {**GOOD, "stream": True, "temperature": 0.2, "unknown_field": {"kept": 1}}
    before = repr(body)
    validate_chat_body(body)
    assert repr(body) == before
