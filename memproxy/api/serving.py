"""How uvicorn serves the app: bind options, graceful shutdown, and a cap on request headers.

Invariants:
- Once the socket is bound, one line says where memproxy listens (the real address, so
  ``--port 0`` shows the port it got); a bind failure exits non-zero with uvicorn's error.
- A request whose header section (request line plus headers) exceeds
  ``server.max_header_bytes`` is answered 431 with an OpenAI-shaped error and its
  connection closed, before the app sees it. uvicorn's httptools protocol has no such
  limit (and buffers a header value whole), so the cap is enforced while bytes arrive:
  once more than the cap has arrived without the headers being complete, reading stops.
  Body bytes never count (the body has its own limit, ``server.max_body_bytes``).
- Without httptools (h11), h11's own buffer limit is set to the same size (uvicorn answers
  its plain 400 then).
"""

from __future__ import annotations

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


def _too_large_response(max_bytes: int) -> bytes:
    body = render_error(
        error_body(
            f"The request headers exceed the limit of {max_bytes} bytes (server.max_header_bytes).",
            status=431,
            code="request_headers_too_large",
        )
    )
    head = (
        b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
        b"content-type: application/json\r\n"
        b"content-length: " + str(len(body)).encode() + b"\r\n"
        b"connection: close\r\n\r\n"
    )
    return head + body


@functools.cache
def capped_http_protocol(max_header_bytes: int) -> Any:
    """uvicorn's httptools protocol with the header cap (a subclass bound to the limit), or
    ``"h11"`` when httptools is not installed.

    One class per limit (cached), named ``CappedHeadersProtocol_<limit>``.
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

        def on_url(self, url: bytes) -> None:
            self._exact += len(url)
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._exact += len(name) + len(value) + 4
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
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
        "http": capped_http_protocol(server.max_header_bytes),
        "h11_max_incomplete_event_size": server.max_header_bytes,
        "log_level": "warning",
        "timeout_graceful_shutdown": math.ceil(server.shutdown_grace_s),
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
