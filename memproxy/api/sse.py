"""Typed server-sent events (``event: <type>`` + ``data: {json}``), as the Responses API and
Anthropic's Messages API stream them: formatting, incremental parsing, and the relay loop
both surfaces share.

Invariants of ``relay``:
- Each event goes to the client as soon as it arrives; nothing waits for the whole answer.
- A terminal event (``response.completed``, ``message_stop`` …) is held until the turn's
  capture is committed, so a client that saw the end of the stream can rely on the job.
- An error after the first byte ends the stream with one error event in the surface's own
  shape; a client that goes away cancels the relay and the upstream stream is closed.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from memproxy.errors import ApiError
from memproxy.outbox.capture import StreamCapture
from memproxy.upstream.surfaces import provider_error

log = logging.getLogger("memproxy.api.sse")

# One upstream item → the frames to send (bytes as sent) and their parsed events.
Frames = Callable[[Any], list[tuple[bytes, dict[str, Any]]]]


def frame(event: dict[str, Any]) -> bytes:
    return f"event: {event.get('type', 'message')}\ndata: {json.dumps(event)}\n\n".encode()


class SSEParser:
    """Splits a byte stream into complete SSE frames and parses each ``data:`` JSON."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[tuple[bytes, dict[str, Any]]]:
        self._buffer += chunk.replace(b"\r\n", b"\n")
        frames: list[tuple[bytes, dict[str, Any]]] = []
        while b"\n\n" in self._buffer:
            raw, self._buffer = self._buffer.split(b"\n\n", 1)
            frames.append((raw + b"\n\n", _data_of(raw)))
        return frames


def _data_of(raw: bytes) -> dict[str, Any]:
    data = b"\n".join(line[5:].lstrip() for line in raw.split(b"\n") if line.startswith(b"data:"))
    try:
        parsed = json.loads(data) if data else {}
    except (UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return parsed if isinstance(parsed, dict) else {}


async def relay(
    stream: Any,
    frames: Frames,
    *,
    terminal: frozenset[str],
    error_event: Callable[[ApiError], dict[str, Any]],
    capture: StreamCapture | None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
) -> AsyncIterator[bytes]:
    try:
        async for item in stream:
            for raw, event in frames(item):
                if on_event is not None:
                    on_event(event)
                if capture is not None:
                    capture.feed(event)
                    if event.get("type") in terminal:
                        await capture.finish()
                        capture = None
                yield raw
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        error = exc if isinstance(exc, ApiError) else provider_error(exc)
        log.warning("stream failed after it began: %s", error.message)
        yield frame(error_event(error))
    finally:
        await close_stream(stream)


async def close_stream(stream: Any) -> None:
    """Close the upstream HTTP stream so the provider stops generating (and billing).

    LiteLLM's chat stream wrapper holds the HTTP stream inside (``completion_stream`` and
    its ``response``); other streams close themselves.
    """
    inner = getattr(stream, "completion_stream", None)
    for candidate in (inner, getattr(inner, "response", None), stream):
        closer = getattr(candidate, "aclose", None) or getattr(candidate, "close", None)
        if closer is None:
            continue
        try:
            result = closer()
            if asyncio.iscoroutine(result):
                await result
        except Exception:
            log.debug("closing upstream stream failed", exc_info=True)
        return
