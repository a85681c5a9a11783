"""How uvicorn serves the app: bind options, graceful shutdown, a cap on request headers,
a deadline for them, and a cap on open connections.

Invariants:
- Once the socket is bound, one line says where memproxy listens (the real address, so
  ``--port 0`` shows the port it got); a bind failure exits non-zero with uvicorn's error.
- A request whose header section (request line plus headers) exceeds
  ``server.max_header_bytes`` is answered 431 with an OpenAI-shaped error and its
  connection closed, before the app sees it. uvicorn's httptools protocol has no such
  limit (and buffers a header value whole), so the cap is enforced while bytes arrive:
  once more than the cap has arrived without the headers being complete, reading stops.
  Body bytes never count (the body has its own limit, ``server.max_body_bytes``).
- A request's header section must arrive within ``server.header_timeout_s`` of its first
  byte (the first request's: of the connection opening, so a connection that says nothing
  counts too); otherwise the connection is closed, with a 408 if part of a request came. A
  client that trickles a header a byte at a time (slowloris) holds its socket that long at
  most. uvicorn has no such deadline: ``timeout_keep_alive`` covers only the idle time
  between requests and is cancelled by the first byte. Bodies and streamed answers are not
  timed (a long upload or a long stream is legitimate).
- At most ``server.max_connections`` connections are open per process; one more is
  answered 503 (OpenAI-shaped, ``connection: close``) and closed at once, so its file
  descriptor is given back instead of waiting for a slot. uvicorn's ``limit_concurrency``
  still accepts and holds such connections (it answers 503 per request), so it is not used.
- Without httptools (h11), h11's own buffer limit is set to the same size (uvicorn answers
  its plain 400 then); the deadline and the connection cap are httptools-only.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import socket
from collections.abc import Sequence
from typing import Any

import uvicorn

from memproxy.config import Settings
from memproxy.errors import error_body, render_error

log = logging.getLogger("memproxy.serving")

_PROTOCOL_PREFIX = "CappedHeadersProtocol_"
# How long a rejected connection may go on sending (its bytes are dropped) before it is closed.
_LINGER_S = 5.0
# Idle time a keep-alive connection is kept between requests. It must outlast the clients' own
# idle expiry: a client reuses a pooled connection until *its* expiry, so a server closing first
# (uvicorn's default is 5 s, the same as httpx's, the OpenAI and Anthropic SDKs', 4 s undici's)
# closes connections a request is being sent on, with the request unread: the client gets a
# reset (httpx ReadError) or "Server disconnected" for a POST it must not retry (the soak's one
# ReadError per run, issue 24). 75 s is nginx's default, above load balancers' usual 60 s.
KEEP_ALIVE_S = 75
# The same for a connection over server.max_connections: short, since it holds a descriptor.
_BUSY_LINGER_S = 1.0
# At most one "over server.max_connections" warning per this many seconds (a flood is one line).
_BUSY_LOG_INTERVAL_S = 10.0


def _raw_response(status: int, reason: str, body: bytes) -> bytes:
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        "content-type: application/json\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    ).encode()
    return head + body


def _too_large_response(max_bytes: int) -> bytes:
    body = render_error(
        error_body(
            f"The request headers exceed the limit of {max_bytes} bytes (server.max_header_bytes).",
            status=431,
            code="request_headers_too_large",
        )
    )
    return _raw_response(431, "Request Header Fields Too Large", body)


def _timeout_response(seconds: float) -> bytes:
    message = f"The request headers did not arrive within {seconds:g} s (server.header_timeout_s)."
    return _raw_response(
        408, "Request Timeout", render_error(error_body(message, status=408, code="request_timeout"))
    )


def _busy_response(limit: int) -> bytes:
    message = f"The server has {limit} connections open (server.max_connections); retry shortly."
    body = render_error(error_body(message, status=503, code="too_many_connections"))
    return _raw_response(503, "Service Unavailable", body)


@functools.cache
def capped_http_protocol(
    max_header_bytes: int, header_timeout_s: float = 30.0, max_connections: int | None = None
) -> Any:
    """uvicorn's httptools protocol with the header cap, the header deadline and the
    connection cap (a subclass bound to the limits), or ``"h11"`` when httptools is not
    installed.

    One class per set of limits (cached), named ``CappedHeadersProtocol_<header bytes>``.
    """
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # pragma: no cover - httptools is a dependency
        return "h11"

    class CappedHeadersProtocol(HttpToolsProtocol):  # type: ignore[misc]
        _in_head = True  # reading a request line and headers (not a body)
        _head_bytes = 0  # raw bytes received in the current head (an upper bound)
        _exact = 0  # request line + header names and values, as parsed
        _rejected = False
        _head_deadline: asyncio.TimerHandle | None = None
        _head_started = False  # a byte of the current request has arrived

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if max_connections is not None and len(self.connections) > max_connections:
                self._refuse_busy()
                return
            self._arm_head_deadline()  # the first request's head: from the connection opening

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm_head_deadline()
            super().connection_lost(exc)

        def _arm_head_deadline(self) -> None:
            if self._head_deadline is None:
                self._head_deadline = self.loop.call_later(header_timeout_s, self._head_timed_out)

        def _disarm_head_deadline(self) -> None:
            if self._head_deadline is not None:
                self._head_deadline.cancel()
                self._head_deadline = None

        def _head_timed_out(self) -> None:
            self._head_deadline = None
            if self.transport.is_closing():
                return
            self._rejected = True  # whatever else arrives is dropped
            if self._head_started:
                log.warning("request headers not complete after server.header_timeout_s (%g s): "
                            "answered 408 and closed", header_timeout_s)  # fmt: skip
                self.transport.write(_timeout_response(header_timeout_s))
            self.transport.close()

        def _refuse_busy(self) -> None:
            self._rejected = True
            now = self.loop.time()
            if now - _busy_log_state[0] >= _BUSY_LOG_INTERVAL_S:
                _busy_log_state[0] = now
                log.warning("connection refused with 503: %d open (server.max_connections)", max_connections)
            self.transport.write(_busy_response(max_connections or 0))
            if not self.transport.can_write_eof():
                self.transport.close()
                return
            self.transport.write_eof()  # as for a 431: closing while the client writes would reset it
            self.loop.call_later(_BUSY_LINGER_S, self.transport.close)

        def data_received(self, data: bytes) -> None:
            if self._rejected:
                return
            if self._in_head:
                self._head_bytes += len(data)
            super().data_received(data)
            if self._in_head and self._head_bytes > max_header_bytes and not self._rejected:
                self._reject()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._exact = 0
            self._head_started = True
            self._arm_head_deadline()  # a later request's head: from its first byte

        def on_url(self, url: bytes) -> None:
            self._exact += len(url)
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._exact += len(name) + len(value) + 4
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
            self._disarm_head_deadline()
            self._head_started = False
            self._in_head, self._head_bytes = False, 0
            if self._exact > max_header_bytes:
                self._rejected = True
                # The parser turns this into an HttpParserError; uvicorn then calls
                # send_400_response, which answers 431 below.
                raise ValueError("request headers too large")
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._in_head = True
            super().on_message_complete()

        def send_400_response(self, msg: str) -> None:
            if not self._rejected:
                super().send_400_response(msg)
                return
            self._write_431()

        def _reject(self) -> None:
            self._rejected = True
            self._write_431()

        def _write_431(self) -> None:
            log.warning("request headers over server.max_header_bytes (%d): answered 431", max_header_bytes)
            if self.transport.is_closing():
                return
            self.transport.write(_too_large_response(max_header_bytes))
            if not self.transport.can_write_eof():
                self.transport.close()
                return
            # Half-close: closing outright while the client is still sending its header would
            # reset the connection and lose the answer; the rest it sends is read and dropped.
            self.transport.write_eof()
            self.loop.call_later(_LINGER_S, self.transport.close)

    _busy_log_state = [-_BUSY_LOG_INTERVAL_S]  # when the last busy warning was logged (loop time)
    CappedHeadersProtocol.__name__ = CappedHeadersProtocol.__qualname__ = (
        f"{_PROTOCOL_PREFIX}{max_header_bytes}"
    )
    return CappedHeadersProtocol


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for ``uvicorn.run`` / ``uvicorn.Config`` from the server settings."""
    server = settings.server
    return {
        "host": server.host,
        "port": server.port,
        "http": capped_http_protocol(
            server.max_header_bytes, server.header_timeout_s, server.max_connections
        ),
        "h11_max_incomplete_event_size": server.max_header_bytes,
        "log_level": "warning",
        "timeout_graceful_shutdown": math.ceil(server.shutdown_grace_s),
        "timeout_keep_alive": KEEP_ALIVE_S,
    }


class AnnouncingServer(uvicorn.Server):
    """uvicorn's server, saying where it listens in memproxy's log format (uvicorn's own
    start-up lines are below the ``warning`` level memproxy runs it at).

    ``announce`` is a format with ``{url}`` (``http://host:port``) for the line.
    """

    def __init__(self, config: uvicorn.Config, announce: str = "memproxy listening on {url}") -> None:
        super().__init__(config)
        self.announce = announce

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if sockets is not None:  # uvicorn announces only the sockets it bound itself
            self._log_started_message(sockets)

    def _log_started_message(self, listeners: Sequence[socket.SocketType]) -> None:
        for sock in listeners:
            host, port = sock.getsockname()[:2]
            shown = f"[{host}]" if ":" in str(host) else str(host)
            log.info(self.announce.format(url=f"http://{shown}:{port}") + " (Ctrl-C to stop)")


def serve(app: Any, settings: Settings, announce: str | None = "memproxy listening on {url}",
          sockets: list[socket.socket] | None = None) -> int:  # fmt: skip
    """Serve ``app`` until SIGTERM/SIGINT; 0 after a clean shutdown, 3 if it never started.

    ``sockets``: already bound sockets to listen on instead of ``server.host``/``port`` (a
    ``--workers`` process); ``announce=None`` says nothing once listening (its supervisor does).
    """
    config = uvicorn.Config(app, **uvicorn_options(settings))
    server = uvicorn.Server(config) if announce is None else AnnouncingServer(config, announce)
    server.run(sockets=sockets)
    return 0 if server.started else 3
