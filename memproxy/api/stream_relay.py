"""The one streaming relay loop: every surface's stream, on the fast path and LiteLLM's, goes
to the client through ``relay``.

A stream's source (``EventSource``) cuts the provider's stream into ``Piece``s of whole events:
``upstream.relay.ProviderStream`` for the provider's own SSE bytes (fast path), ``LiteLLMEvents``
here for LiteLLM's stream objects, or a surface's translator (Messages to an OpenAI-wire
provider). The surface says how its error event looks (``error_frame``) and how its reply is
rebuilt for capture (the ``StreamCapture``'s accumulator).

Invariants:
- Each piece goes to the client as soon as it is cut; nothing waits for the whole answer.
- The final event (``Piece.final``) goes out only after the turn's capture is committed, so a
  client that saw the end of the stream can rely on the job; a stream that ended without one is
  captured at its end if the accumulator saw a finished reply, and never otherwise.
- An error after the first byte ends the stream with one error event in the surface's shape.
- A client that goes away cancels the relay (``EventStream``); the source is closed whatever
  happened, so the provider stops generating (and billing).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any, Protocol

from memproxy.errors import ApiError
from memproxy.outbox.capture import StreamCapture
from memproxy.wire.sse import Piece, json_object

log = logging.getLogger("memproxy.api.stream_relay")

# An error after the first byte → the surface's error event; ``last`` is the piece sent before
# it (the Responses API numbers its error event after the last one).
ErrorFrame = Callable[[ApiError, bytes], bytes]


class EventSource(Protocol):
    def pieces(self) -> AsyncIterator[Piece]: ...

    def error(self, exc: Exception) -> ApiError:
        """The ``ApiError`` for a failure while reading."""
        ...

    async def close(self) -> None: ...


async def relay(
    source: EventSource, capture: StreamCapture | None, error_frame: ErrorFrame, surface: str = "chat"
) -> AsyncGenerator[bytes, None]:
    last = b""
    ended = False  # the final event went out: the client has the whole answer
    try:
        async for piece in source.pieces():
            if capture is not None:
                _feed(capture, piece)
                if piece.final:  # the end of the answer goes out once the turn is captured
                    await capture.finish()
                    capture = None
            ended = ended or piece.final
            if piece.raw:
                last = piece.raw
                yield piece.raw
        if capture is not None:
            await capture.finish()
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        error = exc if isinstance(exc, ApiError) else source.error(exc)
        if ended:  # after the answer's last event an error event would only confuse the client
            log.info(
                "%s stream: the provider's connection failed after the answer ended: %s",
                surface,
                error.message,
            )
        else:
            log.warning("%s stream failed after it began: %s", surface, error.message)
            yield error_frame(error, last)
    finally:
        await source.close()


def _feed(capture: StreamCapture, piece: Piece) -> None:
    for event in piece.events:
        data = event if isinstance(event, dict) else json_object(event)
        if data is not None:
            capture.feed(data)


class LiteLLMEvents:
    """A LiteLLM stream (chunk objects, typed events or SSE bytes) cut into pieces by the
    surface's ``cut``; ``trailer`` (chat's ``data: [DONE]``) follows the last item."""

    def __init__(
        self,
        stream: Any,
        cut: Callable[[Any], list[Piece]],
        error: Callable[[Exception], ApiError],
        trailer: Piece | None = None,
    ) -> None:
        self._stream = stream
        self._cut = cut
        self._error = error
        self._trailer = trailer

    async def pieces(self) -> AsyncIterator[Piece]:
        async for item in self._stream:
            for piece in self._cut(item):
                yield piece
        if self._trailer is not None:
            yield self._trailer

    def error(self, exc: Exception) -> ApiError:
        return self._error(exc)

    async def close(self) -> None:
        await close_stream(self._stream)


async def close_stream(stream: Any) -> None:
    """Close LiteLLM's upstream HTTP stream so the provider stops generating (and billing).

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
