"""One turn of a typed-SSE surface (Responses, Anthropic Messages) relayed on the fast path.

``relay_turn`` sends the forwarded body (the model named as the provider knows it) and
answers with what the provider sent: its error as is (not captured), its SSE bytes as they
arrive, or its JSON body. Capture reads the answer as it passes and never changes it: a
non-streamed turn is committed before the answer is returned, a streamed one before the
surface's final event (``is_final``) goes out. The surface supplies what differs: how a
reply is read off its answer, its stream accumulator, its final event and its error event.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.responses import Response

from memproxy.api.event_stream import EventStream
from memproxy.api.turn import STREAM_HEADERS, PreparedTurn, commit_reply
from memproxy.errors import ApiError
from memproxy.outbox.capture import Accumulator, StreamCapture
from memproxy.services import Services
from memproxy.upstream.fastpath import FastRoute
from memproxy.upstream.relay import relay_events

ReplyOf = Callable[[dict[str, Any]], dict[str, Any] | None]


async def relay_turn(
    services: Services,
    route: FastRoute,
    path: str,
    turn: PreparedTurn,
    stream: bool,
    *,
    reply_of: ReplyOf,
    accumulator: Callable[[], Accumulator],
    is_final: Callable[[bytes], bool],
    error_frame: Callable[[ApiError], bytes],
    extra_headers: dict[str, str] | None = None,
    observe: Callable[[bytes], None] | None = None,
) -> Response:
    """``observe`` sees every ``data:`` payload of a stream (e.g. to number the error event)."""
    payload = json.dumps({**turn.forwarded, "model": route.model}).encode()
    with services.metrics.time_upstream(streamed=stream, path="fast"):
        reply = await services.relay.send(route, path, payload, stream=stream, extra_headers=extra_headers)
    if reply.status >= 400:  # the provider's error, as it sent it (not captured)
        return Response(reply.body, status_code=reply.status, headers=reply.headers)
    if reply.streaming:
        on_data, before_done = _stream_hooks(services, turn, accumulator, observe)
        return EventStream(
            relay_events(reply, on_data, before_done, is_final=is_final, error_frame=error_frame),
            status_code=reply.status,
            headers={**reply.headers, **turn.headers, **STREAM_HEADERS},
        )
    body = reply.body or b""
    answer = json_object(body)
    headers = await commit_reply(services, turn, reply_of(answer) if answer else None)
    return Response(body, status_code=reply.status, headers={**reply.headers, **headers})


def json_object(payload: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(payload)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _stream_hooks(
    services: Services,
    turn: PreparedTurn,
    accumulator: Callable[[], Accumulator],
    observe: Callable[[bytes], None] | None,
) -> tuple[Callable[[bytes], None] | None, Callable[[], Awaitable[None]] | None]:
    capture = StreamCapture(services.capture, turn.plan, accumulator()) if turn.plan is not None else None
    if capture is None and observe is None:
        return None, None

    def on_data(payload: bytes) -> None:
        if observe is not None:
            observe(payload)
        event = json_object(payload) if capture is not None else None
        if capture is not None and event is not None:
            capture.feed(event)

    async def before_done() -> None:
        if capture is not None:
            await capture.finish()

    return on_data, before_done if capture is not None else None
