"""Slow and numerous clients against ``memproxy serve`` (a real process, raw sockets):
``server.header_timeout_s`` closes a connection whose request headers never finish
(slowloris) or that never says anything, but not a keep-alive connection idle between
requests; ``server.max_connections`` answers one connection too many with a 503 and closes it."""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.memory_flow import wait_until
from tests.support.serve_process import ServeProcess, write_config

pytestmark = pytest.mark.slow

LISTENING = re.compile(r"memproxy listening on http://127\.0\.0\.1:(\d+)")
HEADER_TIMEOUT_S = 0.5
MAX_CONNECTIONS = 3
# An upper bound for the server to act, never a wait: every read returns as soon as it does.
PATIENCE_S = 15.0


def serve(tmp_path: Path, **server: float) -> Iterator[int]:
    config = write_config(tmp_path / "config.yaml", {
        "server": {"port": 0, **server},
        "storage": {"data_dir": str(tmp_path / "data")},
        "extraction": {"worker_enabled": False},
    })  # fmt: skip
    with ServeProcess("serve", config, tmp_path / "serve.log") as process:
        yield int(wait_until(lambda: LISTENING.search(process.log_text()), timeout=60).group(1))
        assert process.stop() == 0


@pytest.fixture(scope="module")
def timed_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    yield from serve(tmp_path_factory.mktemp("timed"), header_timeout_s=HEADER_TIMEOUT_S)


@pytest.fixture
def capped_port(tmp_path: Path) -> Iterator[int]:
    yield from serve(tmp_path, max_connections=MAX_CONNECTIONS)


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=PATIENCE_S)
    return sock


def read_until_closed(sock: socket.socket) -> bytes:
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def answer(sock: socket.socket) -> tuple[int, dict[str, object]]:
    """One response on a keep-alive connection (status, JSON body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    length = int(re.search(rb"content-length: (\d+)", head, re.I).group(1))  # type: ignore[union-attr]
    while len(body) < length:
        body += sock.recv(65536)
    return int(head.split()[1]), json.loads(body)


def test_headers_that_never_finish_are_answered_408_and_closed(timed_port: int) -> None:
    with connect(timed_port) as sock:
        started = time.monotonic()
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: a")  # and never the rest
        received = read_until_closed(sock)  # returns once the server closes
        took = time.monotonic() - started
    assert received.startswith(b"HTTP/1.1 408 "), received
    body = json.loads(received.split(b"\r\n\r\n", 1)[1])
    assert (
        body["error"]["code"] == "request_timeout" and "server.header_timeout_s" in body["error"]["message"]
    )
    assert HEADER_TIMEOUT_S * 0.9 <= took < PATIENCE_S


def test_a_connection_that_says_nothing_is_closed_silently(timed_port: int) -> None:
    with connect(timed_port) as sock:
        assert read_until_closed(sock) == b""


def test_idle_time_between_keep_alive_requests_is_not_header_time(timed_port: int) -> None:
    """The deadline runs from a request's first byte: a keep-alive connection that waits
    longer than it between two requests (within the 75 s keep-alive) is still served."""
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    with connect(timed_port) as sock:
        sock.sendall(request)
        assert answer(sock)[0] == 200
        time.sleep(HEADER_TIMEOUT_S * 3)  # idle, as a client between two calls
        sock.sendall(request)
        assert answer(sock)[0] == 200


def test_one_connection_over_the_cap_is_answered_503_and_closed(capped_port: int) -> None:
    held = [connect(capped_port) for _ in range(MAX_CONNECTIONS)]
    try:
        for sock in held:  # each is open and served (so it counts) before the next one comes
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert answer(sock)[0] == 200
        with connect(capped_port) as extra:
            received = read_until_closed(extra)
        assert received.startswith(b"HTTP/1.1 503 "), received
        error = json.loads(received.split(b"\r\n\r\n", 1)[1])["error"]
        assert error["code"] == "too_many_connections" and "server.max_connections" in error["message"]
        held.pop().close()  # a slot frees: the next connection is served

        def served() -> bool:
            with connect(capped_port) as sock:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                return read_until_closed(sock).startswith(b"HTTP/1.1 200 ")

        wait_until(served, timeout=PATIENCE_S)
    finally:
        for sock in held:
            sock.close()
