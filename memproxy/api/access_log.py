"""One access-log line per request, request metrics, and the process's log format.

Invariants:
- Pure ASGI middleware (not ``BaseHTTPMiddleware``): messages are passed on as they come,
  so a streamed answer is relayed chunk by chunk and client disconnects still cancel it.
- Exactly one line per HTTP request, written when the request ends (last byte sent, error
  or disconnect), with: request id, tenant hash, method, route template, status, streamed,
  latency, recalled count and capture job id. The tenant appears only as a short hash.
- A request no route matched also logs its ``path`` (the route template is all a matched
  one needs): percent-encoded as sent, capped at ``PATH_CAP`` characters, a segment that
  looks like a secret replaced by ``<redacted>``, and never the query string (it may carry
  a key). Metrics keep the bounded ``(unmatched)`` label.
- Message and memory text are never logged unless ``server.log_content`` is true; only
  then is the request body copied (capped at ``CONTENT_CAP`` bytes).
- A request whose client left before it was answered is logged (and counted) with status
  499, not as a server error.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any
from urllib.parse import quote

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memproxy.config import ServerSettings
from memproxy.memory.secrets import find_secret
from memproxy.metrics import Metrics
from memproxy.wire.headers import CAPTURE_RESULT, RECALLED

access_log = logging.getLogger("memproxy.access")
_RECALLED = RECALLED.lower().encode()
_CAPTURE = CAPTURE_RESULT.lower().encode()

CONTENT_CAP = 64 * 1024
# nginx's "client closed request": the status of a request whose client left before any answer.
CLIENT_CLOSED = 499
UNMATCHED_ROUTE = "(unmatched)"
PATH_CAP = 200
REDACTED = "<redacted>"
_FIELD_ORDER = (
    "request_id",
    "tenant",
    "method",
    "route",
    "path",
    "status",
    "streamed",
    "latency_ms",
    "recalled",
    "job",
)


class _Exchange:
    """What one request/response pair revealed, filled in as messages pass."""

    def __init__(self, log_content: bool) -> None:
        self.started = time.perf_counter()
        self.status = 0
        self.streamed = False
        self.recalled: int | None = None
        self.job: str | None = None
        self.disconnected = False
        self.body = bytearray() if log_content else None

    def see_response_start(self, message: Message) -> None:
        self.status = int(message["status"])
        for name, value in message.get("headers", []):
            lowered = name.lower()
            if lowered == b"content-type" and value.startswith(b"text/event-stream"):
                self.streamed = True
            elif lowered == _RECALLED:
                self.recalled = _int_or_none(value)
            elif lowered == _CAPTURE:
                self.job = value.decode("latin-1")

    def see_request(self, message: Message) -> None:
        if message["type"] == "http.disconnect":
            self.disconnected = True
        elif self.body is not None and len(self.body) < CONTENT_CAP:
            self.body += message.get("body", b"")[: CONTENT_CAP - len(self.body)]


class AccessLogMiddleware:
    def __init__(self, app: ASGIApp, *, server: ServerSettings, metrics: Metrics | None = None) -> None:
        self.app = app
        self.log_format = server.log_format
        self.log_content = server.log_content
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        exchange = _Exchange(self.log_content)

        async def receive_and_watch() -> Message:
            message = await receive()
            exchange.see_request(message)
            return message

        async def send_and_watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                exchange.see_response_start(message)
            await send(message)

        try:
            await self.app(scope, receive_and_watch, send_and_watch)
        except BaseException:
            if not exchange.status:
                # Failing because the client left is not a server error.
                exchange.status = CLIENT_CLOSED if exchange.disconnected else 500
            raise
        finally:
            self._finish(scope, exchange)

    def _finish(self, scope: Scope, exchange: _Exchange) -> None:
        seconds = time.perf_counter() - exchange.started
        route = route_template(scope)
        if self.metrics is not None:
            self.metrics.observe_request(route, scope["method"], exchange.status, exchange.streamed, seconds)
        state = scope.get("state") or {}
        fields: dict[str, Any] = {
            "request_id": state.get("request_id"),
            "tenant": state.get("tenant_hash"),
            "method": scope["method"],
            "route": route,
            "status": exchange.status,
            "streamed": exchange.streamed,
            "latency_ms": round(seconds * 1000, 1),
            "recalled": exchange.recalled,
            "job": exchange.job,
        }
        if route == UNMATCHED_ROUTE:
            fields["path"] = loggable_path(scope)
        if exchange.body is not None:
            fields["content"] = _content_of(bytes(exchange.body))
        access_log.info(self._format(fields), extra={"access": fields})

    def _format(self, fields: dict[str, Any]) -> str:
        if self.log_format == "json":
            return json.dumps(fields, ensure_ascii=False)
        parts = [f"{key}={_plain(fields[key])}" for key in _FIELD_ORDER if key in fields]
        if "content" in fields:
            parts.append("content=" + json.dumps(fields["content"], ensure_ascii=False))
        return " ".join(parts)


def route_template(scope: Scope) -> str:
    """The matched route's path template (bounded label set), not the raw path."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else UNMATCHED_ROUTE


def loggable_path(scope: Scope) -> str:
    """The request's path for the log: no query string (ASGI keeps it apart), percent-encoded
    so a space or newline cannot forge another field or line, secret-looking segments
    redacted (a client that put its key in the URL), at most ``PATH_CAP`` characters."""
    path = str(scope.get("path") or "/")
    segments = [REDACTED if segment and find_secret(segment) else segment for segment in path.split("/")]
    shown = quote("/".join(segments), safe="/-._~!$&'()*+,;=:@<>")
    return shown if len(shown) <= PATH_CAP else shown[: PATH_CAP - 1] + "…"


def _content_of(body: bytes) -> Any:
    """The request's messages (or raw text) — only ever called when ``log_content`` is on."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace")
    if isinstance(parsed, dict):
        for key in ("messages", "text", "query", "input"):
            if key in parsed:
                return parsed[key]
    return parsed


def _plain(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _int_or_none(value: bytes) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


class JsonLogFormatter(logging.Formatter):
    """Every record as one JSON object; access records carry their fields at top level."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname,
            "logger": record.name,
        }
        fields = getattr(record, "access", None)
        if isinstance(fields, dict):
            out.update(fields)
        else:
            out["message"] = record.getMessage()
        if record.exc_info:
            out["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


def configure_logging(server: ServerSettings, level: int = logging.INFO) -> None:
    """Process-wide logging for ``memproxy serve``: stderr, plain text or JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    if server.log_format == "json":
        handler.setFormatter(JsonLogFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
