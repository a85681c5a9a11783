"""Pathological input (issue 24, finding 4): every one is a 400 in the route's error shape,
never a 500, and nothing of it is stored or forwarded.

Each request goes to a real memproxy over HTTP with its own token, so its tenant is new:
"nothing stored" is then an empty tenant in the database, "nothing forwarded" no request at
the fake provider carrying the test's marker.
"""

from __future__ import annotations

import json
import logging
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from memproxy.auth import passthrough_tenant
from memproxy.testing.background_server import BackgroundServer
from memproxy.testing.scripted_upstream import ScriptedUpstream
from memproxy.wire.json_input import MAX_DEPTH
from tests.support.memory_flow import query
from tests.support.proxy import Proxy, proxy_settings, start_proxy

OPENAI_ERROR_KEYS = {"message", "type", "param", "code"}
TABLES = ("memories", "history", "messages", "jobs", "changes")


def nested(depth: int) -> str:
    """A JSON value ``depth`` containers deep (objects and arrays alternating)."""
    return '{"a":[' * (depth // 2) + ("{}" if depth % 2 else "1") + "]}" * (depth // 2)


def stored_rows(proxy: Proxy, token: str) -> dict[str, int]:
    tenant = passthrough_tenant(token)
    return {table: query(proxy, f"SELECT COUNT(*) FROM {table} WHERE tenant = ?", (tenant,))[0][0]
            for table in TABLES}  # fmt: skip


def forwarded(fake: ScriptedUpstream, marker: str) -> list[str]:
    return [r.path for r in fake.requests if marker in json.dumps(r.body) or marker in r.path]


def assert_openai_400(response: httpx.Response, code: str = "invalid_json") -> dict[str, Any]:
    assert response.status_code == 400, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert set(error) == OPENAI_ERROR_KEYS
    assert error["type"] == "invalid_request_error" and error["code"] == code
    assert isinstance(error["message"], str) and error["message"]
    return dict(error)


# Bodies by the defect they carry; ``{m}`` is the test's marker (a model name or a user id).
PATHOLOGIES = {
    "nested 5000 deep": '{"model":"{m}","user":"{m}","messages":[{"role":"user","content":"hi"}],"x":'
    + "[" * 5000
    + "]" * 5000
    + "}",
    "nested just past the limit": '{"model":"{m}","user":"{m}","messages":[{"role":"user","content":"hi"}],'
    f'"x":{nested(MAX_DEPTH)}' + "}",
    "integer of 5000 digits": '{"model":"{m}","user":"{m}","messages":[{"role":"user","content":"hi"}],'
    '"max_tokens":' + "9" * 5000 + "}",
    "NaN": '{"model":"{m}","user":"{m}","messages":[{"role":"user","content":"hi"}],"temperature":NaN}',
    "1e999": '{"model":"{m}","user":"{m}","messages":[{"role":"user","content":"hi"}],"temperature":1e999}',
    "lone surrogate in user": '{"model":"{m}","messages":[{"role":"user","content":"hi {m}"}],"user":"\\ud800"}',
    # The case that was a plain-text 'Internal Server Error': the provider could not read the body either.
    "lone surrogate in content, user id set": '{"model":"{m}","user":"{m}",'
    '"messages":[{"role":"user","content":"hi \\udc00"}]}',
    "lone surrogate in a key": '{"model":"{m}","user":"{m}","messages":[{"role":"user","content":"hi",'
    '"\\ud800":1}]}',
}
SURFACES = {
    "/v1/chat/completions": "",
    "/v1/responses": "",
    "/v1/messages": "",
    "/v1/completions": "",
    "/v1/embeddings": "",
}


def _body_for(path: str, template: str, marker: str) -> bytes:
    body = template.replace("{m}", marker)
    if path == "/v1/responses":
        body = body.replace('"messages":', '"input":')
    elif path == "/v1/messages":
        body = body.replace('"model":', '"max_tokens":16,"model":', 1)
    elif path == "/v1/completions":
        body = body.replace('"messages":', '"prompt":"text","m":')
    elif path == "/v1/embeddings":
        body = body.replace('"messages":', '"input":"text","m":')
    return body.encode()


@pytest.mark.parametrize("path", list(SURFACES))
@pytest.mark.parametrize("case", list(PATHOLOGIES))
def test_a_pathological_body_on_a_proxy_surface_is_a_400_and_goes_nowhere(
    proxy: Proxy, fake: ScriptedUpstream, path: str, case: str
) -> None:
    marker = "probe-" + uuid.uuid4().hex[:12]
    token = "sk-probe-" + uuid.uuid4().hex
    body = _body_for(path, PATHOLOGIES[case], marker)
    with proxy.http(token) as http:
        response = http.post(path, content=body, headers={"content-type": "application/json"})
    if path == "/v1/messages":  # Anthropic's SDK reads Anthropic's error shape
        assert response.status_code == 400, response.text
        assert response.json()["type"] == "error"
        assert response.json()["error"]["type"] == "invalid_request_error"
        assert "not valid JSON" in response.json()["error"]["message"]
    else:
        error = assert_openai_400(response)
        if "surrogate in user" in case:
            assert error["param"] == "user"
        elif "surrogate in content" in case:
            assert error["param"].endswith("[0].content")  # messages, input, …
    assert forwarded(fake, marker) == []
    assert stored_rows(proxy, token) == dict.fromkeys(TABLES, 0)


def test_the_nesting_limit_itself_is_served_on_both_upstream_paths(
    proxy: Proxy, litellm_proxy: Proxy, fake: ScriptedUpstream
) -> None:
    """A body exactly ``MAX_DEPTH`` deep is an ordinary request: the limit refuses nothing less."""
    for server in (proxy, litellm_proxy):
        marker = "deep-" + uuid.uuid4().hex[:12]
        body = json.loads('{"x":' + nested(MAX_DEPTH - 1) + "}")
        body.update(model="gpt-4o-mini", user=marker, messages=[{"role": "user", "content": marker}])
        with server.http() as http:
            response = http.post("/v1/chat/completions", json=body)
        assert response.status_code == 200, response.text
        assert forwarded(fake, marker)


def test_a_surrogate_pair_is_not_a_lone_surrogate(proxy: Proxy) -> None:
    """ASCII-only encoders send an emoji as a pair of escapes: that is valid and stored as the emoji."""
    token = "sk-probe-" + uuid.uuid4().hex
    with proxy.http(token) as http:
        response = http.post("/v1/memories", content=b'{"user_id":"u","text":"Likes \\ud83d\\ude00 emoji"}',
                             headers={"content-type": "application/json"})  # fmt: skip
    assert response.status_code == 201, response.text
    assert response.json()["text"] == "Likes \U0001f600 emoji"


MEMORY_BODIES = {
    "lone surrogate in user_id": ('{"user_id":"\\ud800","text":"a fact"}', "user_id"),
    "lone surrogate in text": ('{"user_id":"u","text":"a fact \\ud800"}', "text"),
    "lone surrogate in metadata": (
        '{"user_id":"u","text":"a fact","metadata":{"k":"\\udfff"}}',
        "metadata.k",
    ),
    "lone surrogate in a metadata key": (
        '{"user_id":"u","text":"a fact","metadata":{"\\ud800":1}}',
        "metadata",
    ),
    "NaN in metadata": ('{"user_id":"u","text":"a fact","metadata":{"k":NaN}}', None),
    "Infinity in metadata": ('{"user_id":"u","text":"a fact","metadata":{"k":-Infinity}}', None),
    "integer of 4301 digits": ('{"user_id":"u","text":"a fact","metadata":{"k":' + "1" * 4301 + "}}", None),
    "nested 1000 deep": ('{"user_id":"u","text":"a fact","metadata":' + nested(1000) + "}", None),
    "not UTF-8": ('{"user_id":"u","text":"a fact \xff"}', None),
}


@pytest.mark.parametrize("case", list(MEMORY_BODIES))
def test_a_pathological_memory_is_a_400_and_nothing_is_stored(proxy: Proxy, case: str) -> None:
    text, param = MEMORY_BODIES[case]
    raw = text.encode("latin-1") if case == "not UTF-8" else text.encode()
    token = "sk-probe-" + uuid.uuid4().hex
    with proxy.http(token) as http:
        created = http.post("/v1/memories", content=raw, headers={"content-type": "application/json"})
        searched = http.post("/v1/memories/search", content=raw.replace(b'"text"', b'"query"'),
                             headers={"content-type": "application/json"})  # fmt: skip
        listed = http.get("/v1/memories")
    assert assert_openai_400(created)["param"] == param
    assert assert_openai_400(searched)["param"] == (param.replace("text", "query") if param else None)
    assert listed.status_code == 200 and listed.json()["data"] == []
    assert stored_rows(proxy, token) == dict.fromkeys(TABLES, 0)


@pytest.mark.parametrize(
    "expires_at", ["1e300", "-1", "9" * 400, '"0001-01-01T00:00:00+14:00"', '"10000-01-01"']
)
def test_an_expiry_no_reader_could_print_is_a_400_not_a_stored_row(proxy: Proxy, expires_at: str) -> None:
    """1e300 used to be stored, then every read of the row (this create's answer included) was a 500."""
    token = "sk-probe-" + uuid.uuid4().hex
    with proxy.http(token) as http:
        response = http.post("/v1/memories", content=f'{{"user_id":"u","text":"a fact","expires_at":{expires_at}}}',
                             headers={"content-type": "application/json"})  # fmt: skip
    error = assert_openai_400(response, code="invalid_value")
    assert error["param"] == "expires_at"
    assert stored_rows(proxy, token) == dict.fromkeys(TABLES, 0)


def test_an_import_with_a_lone_surrogate_on_line_101_is_a_400_naming_it_and_imports_nothing(
    proxy: Proxy,
) -> None:
    token = "sk-probe-" + uuid.uuid4().hex
    lines = [json.dumps({"user_id": "u", "text": f"fact number {i}"}) for i in range(1, 101)]
    lines.append('{"user_id":"u","text":"fact \\ud800 number 101"}')
    with proxy.http(token) as http:
        response = http.post("/v1/memories/import", content="\n".join(lines).encode(),
                             headers={"content-type": "application/x-ndjson"})  # fmt: skip
    error = assert_openai_400(response)
    assert error["param"] == "line 101" and error["message"].startswith("line 101:")
    assert "surrogate" in error["message"]
    assert stored_rows(proxy, token) == dict.fromkeys(TABLES, 0)


def test_a_query_integer_of_5000_digits_is_a_400(proxy: Proxy) -> None:
    with proxy.http("sk-probe-" + uuid.uuid4().hex) as http:
        response = http.get("/v1/memories", params={"limit": "9" * 5000})
    assert assert_openai_400(response, code="invalid_type")["param"] == "limit"


# --- a provider that does not answer JSON --------------------------------------------------


@pytest.fixture(scope="module")
def html_provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    """memproxy in front of a 'provider' whose model route answers an HTML page with 200."""

    async def page(request: Request) -> Response:
        return Response("<html><body>Welcome to nginx!</body></html>", media_type="text/html")

    async def plain_error(request: Request) -> Response:
        return Response(
            '{"error": "model \'gone\' not found"}', status_code=404, media_type="application/json"
        )

    async def list_error(request: Request) -> Response:
        return Response("[1, 2]", status_code=400, media_type="application/json")

    app = Starlette(routes=[
        Route("/v1/models/gone", plain_error), Route("/v1/models/listed", list_error),
        Route("/v1/models/{rest:path}", page), Route("/v1/models", page),
    ])  # fmt: skip
    with BackgroundServer(app) as upstream:
        server, handle = start_proxy(proxy_settings(upstream.url + "/v1", tmp_path_factory.mktemp("html")))
        yield handle
        server.stop()


def test_a_non_json_provider_reply_on_a_model_is_a_502_in_openai_shape(html_provider: Proxy) -> None:
    with html_provider.http() as http:
        response = http.get("/v1/models/gpt-4o-mini")
        plain = http.get("/v1/models/gone")
        listed = http.get("/v1/models/listed")
    assert response.status_code == 502, response.text
    error = response.json()["error"]
    assert set(error) == OPENAI_ERROR_KEYS and error["type"] == "server_error" and error["code"]
    # A provider's error that is not OpenAI-shaped is passed on with its status, in OpenAI's shape.
    assert plain.status_code == 404, plain.text
    assert plain.json()["error"]["message"] == "model 'gone' not found"
    assert listed.status_code == 400, listed.text
    assert set(listed.json()["error"]) == OPENAI_ERROR_KEYS and listed.json()["error"]["message"] == "[1, 2]"


# --- a client that leaves ------------------------------------------------------------------


def test_a_client_that_leaves_mid_body_is_logged_as_499_not_as_a_server_error(
    proxy: Proxy, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    rid = "gone-" + uuid.uuid4().hex[:12]
    host, port = proxy.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(
            b"POST /v1/memories HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-probe-gone\r\n"
            b"Content-Type: application/json\r\nContent-Length: 100000\r\n"
            b"X-Request-Id: " + rid.encode() + b'\r\n\r\n{"user_id":"u","text":"half'
        )
    # The line is written when the server notices; wait for it (not a fixed sleep).
    deadline = time.monotonic() + 10
    lines: list[logging.LogRecord] = []
    while not lines and time.monotonic() < deadline:
        lines = [r for r in caplog.records if r.name == "memproxy.access" and rid in r.getMessage()]
        time.sleep(0.02)
    assert len(lines) == 1
    assert "status=499" in lines[0].getMessage()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], "no error, no traceback"
