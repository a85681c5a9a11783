"""The fast path's HTTP side: send a body to an OpenAI-wire provider, relay its bytes back.

``Relay`` owns one pooled aiohttp ``ClientSession`` (HTTP/1.1 keep-alive; measured against
httpx's ``AsyncClient`` on this machine class: ~6x the requests/s at concurrency 32, see
docs/performance.md). ``send`` returns a ``Reply``: the provider's status, the headers worth
passing on, and either the whole body or the open stream. ``ProviderStream`` reads an open
SSE answer as whole-event pieces for the one relay loop (``api.stream_relay``).

Invariants:
- What the provider sent is what the client gets: status, body bytes and SSE bytes are
  never re-encoded; only the headers in ``_PASSED`` (content type, rate limits) are copied.
- A stream is read in whole events (up to the last blank line received): a client never
  sees half an event, so a failure after the first byte can always be reported as one
  final error event.
- No path with a ``.``/``..`` segment is sent (``_check_path``): ids in paths stay ids.
- Timeouts are ``upstream.timeout_s`` per connect/read (as on the LiteLLM path) → 504;
  an unreachable provider or a broken connection before the answer → 502.
- A ``Reply`` whose stream is not read to the end is closed (``close``), which drops the
  connection, so the provider sees the client leave and stops generating.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import aiohttp

from memproxy.errors import ApiError, error_type_for
from memproxy.upstream.fastpath import FastRoute
from memproxy.upstream.provider import timeout_error, unreachable_error
from memproxy.wire.sse import DONE, Piece, data_lines, event_start, is_done, split_events

log = logging.getLogger(__name__)

_PASSED_PREFIXES = ("x-ratelimit-", "openai-", "anthropic-ratelimit-")
_PASSED = frozenset({"content-type", "retry-after", "retry-after-ms", "request-id"})
# Connections kept per process: enough for a burst of concurrent streams.
POOL_SIZE = 256
KEEPALIVE_S = 4.0


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


class ProviderStream:
    """An open SSE answer, read as ``Piece``s for ``api.stream_relay.relay`` (the one relay loop).

    ``is_final`` names the surface's final event (chat's ``[DONE]``, the Responses API's
    ``response.completed`` …). With ``watch`` (capture reads the turn), each piece carries its
    ``data:`` payloads (chat's ``[DONE]`` aside) and the final event starts a piece of its own;
    without it, events pass in the blocks they arrived in, unread."""

    def __init__(self, reply: Reply, is_final: Callable[[bytes], bool] = is_done, *, watch: bool) -> None:
        self.reply = reply
        self._is_final = is_final
        self._watch = watch

    async def pieces(self) -> AsyncIterator[Piece]:
        pending = b""
        finished = not self._watch
        async for chunk in self.reply.chunks():
            pending += chunk
            cut = split_events(pending)
            if not cut:
                continue
            events, pending = pending[:cut], pending[cut:]
            if not self._watch:
                yield Piece(events, [])
                continue
            found = data_lines(events)
            start = None if finished else self._final_start(events, found)
            lines = [(offset, payload) for offset, payload in found if payload != DONE]
            if start is None:
                yield Piece(events, [payload for _, payload in lines])
                continue
            finished = True
            if start:
                yield Piece(events[:start], [payload for offset, payload in lines if offset < start])
            yield Piece(events[start:], [payload for offset, payload in lines if offset >= start], final=True)
        if pending:  # a last event without its blank line: sent as it came (captured first if final)
            found = data_lines(pending) if self._watch else []
            final = not finished and self._final_start(pending, found) is not None
            yield Piece(pending, [payload for _, payload in found if payload != DONE], final=final)
        self.reply.release()

    def _final_start(self, events: bytes, lines: list[tuple[int, bytes]]) -> int | None:
        for offset, payload in lines:
            if self._is_final(payload):
                return event_start(events, offset)
        return None

    def error(self, exc: Exception) -> ApiError:
        return stream_error(exc)

    async def close(self) -> None:
        self.reply.close()


def stream_error(exc: Exception) -> ApiError:
    """The ``ApiError`` for a failure while reading a provider's stream (timeout: 504, else 502)."""
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
