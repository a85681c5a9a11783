"""The fast path's HTTP side: send a body to an OpenAI-wire provider, relay its bytes back.

``Relay`` owns one pooled aiohttp ``ClientSession`` (HTTP/1.1 keep-alive; measured against
httpx's ``AsyncClient`` on this machine class: ~6x the requests/s at concurrency 32, see
``notes``/README). ``send`` returns a ``Reply``: the provider's status, the headers worth
passing on, and either the whole body or the open stream. ``relay_events`` relays an SSE
stream as it arrives and lets the caller look at each ``data:`` line on the way.

Invariants:
- What the provider sent is what the client gets: status, body bytes and SSE bytes are
  never re-encoded; only the headers in ``_PASSED`` (content type, rate limits) are copied.
- A stream is relayed in whole events (up to the last blank line received): a client never
  sees half an event, so a failure after the first byte can always be reported as one
  final ``data: {"error": …}`` event.
- No path with a ``.``/``..`` segment is sent (``_check_path``): ids in paths stay ids.
- Timeouts are ``upstream.timeout_s`` per connect/read (as on the LiteLLM path) → 504;
  an unreachable provider or a broken connection before the answer → 502.
- A ``Reply`` whose stream is not read to the end is closed (``close``), which drops the
  connection, so the provider sees the client leave and stops generating.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import aiohttp

from memproxy.errors import ApiError, error_type_for
from memproxy.upstream.fastpath import FastRoute
from memproxy.upstream.provider import timeout_error, unreachable_error

log = logging.getLogger(__name__)

_PASSED_PREFIXES = ("x-ratelimit-", "openai-", "anthropic-ratelimit-")
_PASSED = frozenset({"content-type", "retry-after", "retry-after-ms", "request-id"})
# Connections kept per process: enough for a burst of concurrent streams.
POOL_SIZE = 256
KEEPALIVE_S = 4.0
_DONE = b"[DONE]"


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes | None  # the whole body; None while ``stream`` is open
    response: aiohttp.ClientResponse | None = None

    @property
    def streaming(self) -> bool:
        return self.response is not None

    async def chunks(self) -> AsyncIterator[bytes]:
        assert self.response is not None
        async for chunk in self.response.content.iter_any():
            yield chunk

    def close(self) -> None:
        """Drop the connection (not back to the pool): the provider sees the caller leave."""
        if self.response is not None:
            self.response.close()

    def release(self) -> None:
        """The stream was read to its end: the connection goes back to the pool."""
        if self.response is not None:
            self.response.release()


class Relay:
    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        # Idle connections are dropped before common server idle timeouts (uvicorn's and Node's
        # 5 s): reusing one the provider is closing at that instant fails the request.
        connector = aiohttp.TCPConnector(limit=POOL_SIZE, ttl_dns_cache=300, keepalive_timeout=KEEPALIVE_S)
        # auto_decompress stays on and identity is asked for: if a provider compresses
        # anyway, the client gets the plain bytes (and no Content-Encoding header).
        self._session = aiohttp.ClientSession(connector=connector, skip_auto_headers=("User-Agent",))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def send(
        self,
        route: FastRoute,
        path: str,
        body: bytes | None,
        *,
        stream: bool,
        method: str = "POST",
        extra_headers: dict[str, str] | None = None,
    ) -> Reply:
        """``method`` (POST: ``body``) ``route.base_url + path``; the stream stays open when it is one.

        The key goes as ``Authorization: Bearer`` (OpenAI's wire) or ``x-api-key`` (Anthropic's)."""
        if self._session is None:
            raise RuntimeError("Relay.send before open")
        _check_path(path)
        headers = {"Content-Type": "application/json", "Accept-Encoding": "identity", **(extra_headers or {})}
        if route.api_key and route.provider == "anthropic":
            headers["x-api-key"] = route.api_key
        elif route.api_key:
            headers["Authorization"] = f"Bearer {route.api_key}"
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=route.timeout_s, sock_read=route.timeout_s)
        url = route.base_url + path
        try:
            try:
                response = await self._session.request(
                    method, url, data=body, headers=headers, timeout=timeout
                )
            except aiohttp.ServerDisconnectedError:
                # A pooled connection the provider closed as we sent: no answer was read, so
                # send once more on a fresh one (what Go's net/http does for reused connections).
                response = await self._session.request(
                    method, url, data=body, headers=headers, timeout=timeout
                )
        except TimeoutError as exc:
            raise timeout_error() from exc
        except aiohttp.ClientError as exc:
            raise unreachable_error(_describe(exc)) from exc
        passed = _passed_headers(response)
        if stream and response.status < 400 and _is_event_stream(response):
            return Reply(response.status, passed, None, response)
        try:
            data = await response.read()
        except TimeoutError as exc:
            response.close()
            raise timeout_error() from exc
        except aiohttp.ClientError as exc:
            response.close()
            raise unreachable_error(_describe(exc)) from exc
        response.release()
        return Reply(response.status, passed, data)


def _check_path(path: str) -> None:
    """The last guard before a client-supplied id becomes part of a provider URL: a ``.`` or
    ``..`` segment (plain or percent-encoded) would move the request elsewhere on the host."""
    if any(unquote(segment) in (".", "..") for segment in path.split("?", 1)[0].split("/")):
        raise ApiError(400, "Invalid id: it contains a '.' or '..' path segment.", code="invalid_id")


def _passed_headers(response: aiohttp.ClientResponse) -> dict[str, str]:
    return {
        k: v
        for k, v in response.headers.items()
        if k.lower() in _PASSED or k.lower().startswith(_PASSED_PREFIXES)
    }


def _is_event_stream(response: aiohttp.ClientResponse) -> bool:
    return response.content_type == "text/event-stream"


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def error_event(error: ApiError) -> bytes:
    return b"data: " + json.dumps(error.body()).encode() + b"\n\n"


def split_events(buffer: bytes) -> int:
    """Length of the complete events at the start of ``buffer`` (up to the last blank line)."""
    ends = [buffer.rfind(sep) + len(sep) for sep in (b"\n\n", b"\r\n\r\n", b"\r\r") if sep in buffer]
    return max(ends, default=0)


def data_lines(events: bytes) -> list[tuple[int, bytes]]:
    """``(offset, payload)`` of every ``data:`` line in ``events``, in order."""
    found: list[tuple[int, bytes]] = []
    offset = 0
    for line in events.splitlines(keepends=True):
        if line.startswith(b"data:"):
            found.append((offset, line[5:].strip()))
        offset += len(line)
    return found


def is_done(payload: bytes) -> bool:
    """Chat's end of stream: the ``data: [DONE]`` line."""
    return payload == _DONE


def event_start(events: bytes, offset: int) -> int:
    """Where the event holding byte ``offset`` of ``events`` begins (after the blank line before it)."""
    found = [(events.rfind(sep, 0, offset), sep) for sep in (b"\n\n", b"\r\n\r\n", b"\r\r")]
    return max((at + len(sep) for at, sep in found if at >= 0), default=0)


async def relay_events(
    reply: Reply,
    on_data: Callable[[bytes], None] | None = None,
    before_done: Callable[[], Awaitable[None]] | None = None,
    *,
    is_final: Callable[[bytes], bool] = is_done,
    error_frame: Callable[[ApiError], bytes] | None = None,
) -> AsyncIterator[bytes]:
    """The provider's SSE bytes in whole events, as they arrive.

    ``on_data`` sees each ``data:`` payload (not chat's ``[DONE]``); ``before_done`` is
    awaited before the final event (``is_final``: chat's ``[DONE]``, the Responses API's
    ``response.completed``) goes out, or at the end of a stream that had none. A failure
    after the first byte ends the relay with one error event (``error_frame``: chat's
    ``data: {"error": …}`` unless the surface has its own shape).
    """
    pending = b""
    finished = False
    watch = on_data is not None or before_done is not None
    try:
        async for chunk in reply.chunks():
            pending += chunk
            cut = split_events(pending)
            if not cut:
                continue
            events, pending = pending[:cut], pending[cut:]
            if not watch:
                yield events
                continue
            for offset, payload in data_lines(events):
                if on_data is not None and payload != _DONE:
                    on_data(payload)
                if not finished and is_final(payload):
                    finished = True
                    start = event_start(events, offset)
                    if start:
                        yield events[:start]
                    events = events[start:]
                    if before_done is not None:
                        await before_done()
            yield events
        if pending:
            yield pending
        if not finished and before_done is not None:
            await before_done()
        reply.release()
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        error = _stream_error(exc)
        log.warning("stream failed after it began: %s", error.message)
        yield (error_frame or error_event)(error)
    finally:
        reply.close()


def _stream_error(exc: Exception) -> ApiError:
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, TimeoutError):
        return timeout_error()
    return unreachable_error(_describe(exc))


def provider_error(status: int, data: Any) -> ApiError:
    """The ``ApiError`` for a provider's answer ``data`` (OpenAI's ``{"error": {...}}`` shape when it
    sent one), for callers that translate the answer rather than relay it."""
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and error.get("message"):
        return ApiError(status, str(error["message"]), type=error.get("type") or error_type_for(status),
                        param=error.get("param"), code=error.get("code"))  # fmt: skip
    if status < 400:
        return ApiError(502, "the provider's answer is not a JSON object", type="upstream_error")
    return ApiError(status, f"the provider answered {status}", type=error_type_for(status))
