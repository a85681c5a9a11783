"""Keep-alive: ``memproxy serve`` keeps an idle connection open longer than clients keep it
in their pools, so a client never sends a request on a connection the server is closing.

The failure this guards against (issue 24, the soak's one ``ReadError`` per run under
``--workers 2``): uvicorn closes an idle connection after 5 s, the same as httpx's pool
expiry (and so the OpenAI SDK's). A client that picks a connection idle for just under 5 s
sends its request as the server's timer fires; with the event loop busy the request is
still unread when the socket closes, and the client gets a reset (``ReadError``) or
"Server disconnected" for a POST it cannot safely retry.

A real server process, raw sockets: whether the server closed is whether the socket turns
readable with nothing to read.
"""

from __future__ import annotations

import re
import select
import socket
from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.support.memory_flow import wait_until
from tests.support.serve_process import ServeProcess, write_config

pytestmark = pytest.mark.slow  # a subprocess, and an idle wait longer than a client's expiry

LISTENING = re.compile(r"memproxy listening on http://127\.0\.0\.1:(\d+)")
# Beyond the clients' expiry: the server must still hold the connection then.
MARGIN_S = 1.0
REQUEST = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def clients_idle_expiry() -> float:
    """The longest idle time the usual Python clients keep a pooled connection: httpx's
    default and the OpenAI SDK's (which passes its own ``httpx.Limits``)."""
    expiries = [httpx.Limits().keepalive_expiry, openai.DEFAULT_CONNECTION_LIMITS.keepalive_expiry]
    return max(e for e in expiries if e is not None)


@pytest.fixture(scope="module")
def port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    tmp = tmp_path_factory.mktemp("keep-alive")
    config = write_config(tmp / "config.yaml", {
        "server": {"port": 0},
        "storage": {"data_dir": str(tmp / "data")},
        "extraction": {"worker_enabled": False},
    })  # fmt: skip
    with ServeProcess("serve", config, tmp / "serve.log") as process:
        yield int(wait_until(lambda: LISTENING.search(process.log_text()), timeout=60).group(1))
        assert process.stop() == 0


def read_response(sock: socket.socket) -> bytes:
    """One response with a Content-Length body (what /healthz sends)."""
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = sock.recv(65536)
        assert chunk, f"closed before a response: {received!r}"
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "closed mid-body"
        body += chunk
    return head


def test_an_idle_connection_outlives_the_clients_pool_expiry(port: int) -> None:
    expiry = clients_idle_expiry()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(REQUEST)
        assert read_response(sock).startswith(b"HTTP/1.1 200")
        # Returns at once if the server closes (the socket turns readable: EOF); otherwise
        # after the deadline, which is what is asserted.
        readable, _, _ = select.select([sock], [], [], expiry + MARGIN_S)
        assert not readable, f"the server closed an idle connection within {expiry + MARGIN_S} s"
        sock.sendall(REQUEST)
        assert read_response(sock).startswith(b"HTTP/1.1 200")
