"""The access log: one line per request with its fields; content only when asked for."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from memproxy.testing.scripted_upstream import ScriptedUpstream
from tests.support.proxy import Proxy, proxy_settings, start_proxy


def access_lines(caplog: pytest.LogCaptureFixture, request_id: str) -> list[logging.LogRecord]:
    # The line is written when the response's last byte has gone; give the server a moment.
    deadline = time.monotonic() + 5
    while True:
        found = [r for r in caplog.records if r.name == "memproxy.access" and request_id in r.getMessage()]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


@pytest.fixture(scope="module")
def json_proxy(
    upstream: tuple[ScriptedUpstream, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Proxy]:
    settings = proxy_settings(
        upstream[1],
        Path(tmp_path_factory.mktemp("jsonlog")),
        server={"log_format": "json", "log_content": True},
    )
    server, handle = start_proxy(settings)
    yield handle
    server.stop()


def test_one_plain_line_per_request_with_its_fields(proxy: Proxy, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    secret = "secret-" + uuid.uuid4().hex
    rid = "req-" + uuid.uuid4().hex[:12]
    client = proxy.client(**{"X-Request-Id": rid, "X-Memproxy-User-Id": "log-user"})
    client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": secret}])

    lines = access_lines(caplog, rid)
    assert len(lines) == 1
    message = lines[0].getMessage()
    fields = dict(part.split("=", 1) for part in message.split(" "))
    assert fields["request_id"] == rid
    assert fields["method"] == "POST"
    assert fields["route"] == "/v1/chat/completions"
    assert fields["status"] == "200"
    assert fields["streamed"] == "false"
    assert float(fields["latency_ms"]) > 0
    assert len(fields["tenant"]) == 12 and fields["tenant"] != "-"
    assert "sk-test-user-a" not in message
    assert {"recalled", "job"} <= fields.keys()
    # Content is not logged by default, by the access log or anything else.
    assert not any(secret in record.getMessage() for record in caplog.records)
    # One line per request: LiteLLM's own per-call INFO lines are kept out.
    assert not [r for r in caplog.records if r.name.startswith("LiteLLM") and r.levelno < logging.WARNING]


def test_streamed_request_logs_once_after_the_stream(proxy: Proxy, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    rid = "req-" + uuid.uuid4().hex[:12]
    client = proxy.client(**{"X-Request-Id": rid})
    chunks = list(
        client.chat.completions.create(
            model="slow", messages=[{"role": "user", "content": "a b c d"}], stream=True
        )
    )
    assert len(chunks) > 3
    lines = access_lines(caplog, rid)
    assert len(lines) == 1
    assert "streamed=true" in lines[0].getMessage()
    # Slow chunks are 50 ms apart: the latency covers the whole stream, not just its start.
    latency = float(lines[0].getMessage().split("latency_ms=")[1].split(" ")[0])
    assert latency >= 100


def test_failed_and_unauthenticated_requests_are_logged(
    proxy: Proxy, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    rid = "req-" + uuid.uuid4().hex[:12]
    with proxy.http(token=None) as http:
        response = http.post(
            "/v1/chat/completions", json={"model": "x", "messages": []}, headers={"X-Request-Id": rid}
        )
    assert response.status_code == 401
    (line,) = access_lines(caplog, rid)
    assert "status=401" in line.getMessage() and "tenant=-" in line.getMessage()


def test_json_format_parses_and_log_content_includes_messages(
    json_proxy: Proxy, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    secret = "visible-" + uuid.uuid4().hex
    rid = "req-" + uuid.uuid4().hex[:12]
    client = json_proxy.client(**{"X-Request-Id": rid})
    client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": secret}])
    (line,) = access_lines(caplog, rid)
    record = json.loads(line.getMessage())
    assert record["request_id"] == rid
    assert record["status"] == 200 and record["streamed"] is False
    assert record["route"] == "/v1/chat/completions"
    assert record["content"] == [{"role": "user", "content": secret}]


def test_an_unmatched_route_logs_its_path_without_query_or_secrets(
    proxy: Proxy, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    rid, key_rid = ("req-" + uuid.uuid4().hex[:12] for _ in range(2))
    key = "sk-proj-" + uuid.uuid4().hex + uuid.uuid4().hex[:8]
    with proxy.http(None) as http:
        missing = http.get("/v2/chat/completions", params={"api_key": key}, headers={"X-Request-Id": rid})
        # A client that put its key in the URL's path: the segment is redacted, the rest kept.
        keyed = http.get(f"/v1/{key}/models", headers={"X-Request-Id": key_rid})
    assert missing.status_code == keyed.status_code == 404
    (line,) = access_lines(caplog, rid)
    fields = dict(part.split("=", 1) for part in line.getMessage().split(" "))
    assert fields["route"] == "(unmatched)" and fields["path"] == "/v2/chat/completions"
    assert fields["status"] == "404"
    (keyed_line,) = access_lines(caplog, key_rid)
    assert "path=/v1/<redacted>/models" in keyed_line.getMessage()
    assert not [r for r in caplog.records if key in r.getMessage()]


def test_a_matched_route_logs_its_template_and_no_path(
    proxy: Proxy, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    rid = "req-" + uuid.uuid4().hex[:12]
    with proxy.http() as http:
        assert http.get("/v1/memories/mem-nope", headers={"X-Request-Id": rid}).status_code == 404
    (line,) = access_lines(caplog, rid)
    assert "route=/v1/memories/{memory_id}" in line.getMessage() and " path=" not in line.getMessage()


def test_a_json_line_of_an_unmatched_route_carries_a_path_field(
    json_proxy: Proxy, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    rid = "req-" + uuid.uuid4().hex[:12]
    with json_proxy.http(None) as http:
        assert http.get("/nowhere/" + "x" * 400, headers={"X-Request-Id": rid}).status_code == 404
    (line,) = access_lines(caplog, rid)
    record = json.loads(line.getMessage())
    assert record["route"] == "(unmatched)"
    assert record["path"].startswith("/nowhere/xxx") and len(record["path"]) == 200  # capped
