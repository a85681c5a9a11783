"""``POST /v1/messages`` on the fast path: a model served by Anthropic gets the request
relayed byte for byte to its Messages API; every other model keeps LiteLLM's translation.

Invariants (the same as the LiteLLM path in ``messages``):
- The forwarded body is the caller's, every field included (``cache_control`` breakpoints,
  fields LiteLLM does not know yet), plus at most the memory text block, with the model
  named as the provider knows it. The caller's ``anthropic-version`` and ``anthropic-beta``
  headers go with it. Status, body and SSE bytes are the provider's (its errors are already
  Anthropic-shaped); memproxy adds only its ``X-Memproxy-*`` headers to a successful answer.
- Capture reads the answer as it passes and never changes it: a non-streamed turn is
  committed before the answer is returned, a streamed one before ``message_stop`` goes out.
  An error answer or a cut stream is not captured.
- A failure after the first byte ends the stream with Anthropic's ``error`` event.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.responses import Response, StreamingResponse

from memproxy.api.turn import STREAM_HEADERS, PreparedTurn, commit_reply
from memproxy.errors import ApiError, anthropic_error_body
from memproxy.fastpath import FastRoute
from memproxy.outbox.capture import StreamCapture
from memproxy.proxy import anthropic_turn
from memproxy.relay import relay_events
from memproxy.services import Services

MESSAGES_PATH = "/v1/messages"
# The version the Anthropic SDK sends; used only when a caller sends none.
DEFAULT_VERSION = "2023-06-01"
_PASSED_REQUEST_HEADERS = ("anthropic-version", "anthropic-beta")


async def fast_message(
    services: Services, route: FastRoute, turn: PreparedTurn, stream: bool, request_headers: dict[str, str]
) -> Response:
    payload = json.dumps({**turn.forwarded, "model": route.model}).encode()
    passed = {name: request_headers[name] for name in _PASSED_REQUEST_HEADERS if name in request_headers}
    passed.setdefault("anthropic-version", DEFAULT_VERSION)
    with services.metrics.time_upstream(streamed=stream, path="fast"):
        reply = await services.relay.send(route, MESSAGES_PATH, payload, stream=stream, extra_headers=passed)
    if reply.status >= 400:  # the provider's error, as it sent it (not captured)
        return Response(reply.body, status_code=reply.status, headers=reply.headers)
    if reply.streaming:
        on_data, before_done = _stream_hooks(services, turn)
        return StreamingResponse(
            relay_events(reply, on_data, before_done, is_final=_is_stop, error_frame=_error_frame),
            status_code=reply.status,
            headers={**reply.headers, **turn.headers, **STREAM_HEADERS},
        )
    body = reply.body or b""
    message = _json(body)
    headers = await commit_reply(
        services, turn, anthropic_turn.reply_from_message(message) if message else None
    )
    return Response(body, status_code=reply.status, headers={**reply.headers, **headers})


def _json(payload: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(payload)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _is_stop(payload: bytes) -> bool:
    if b"message_stop" not in payload:
        return False
    event = _json(payload)
    return event is not None and event.get("type") == "message_stop"


def _error_frame(error: ApiError) -> bytes:
    return b"event: error\ndata: " + json.dumps(anthropic_error_body(error)).encode() + b"\n\n"


def _stream_hooks(
    services: Services, turn: PreparedTurn
) -> tuple[Callable[[bytes], None] | None, Callable[[], Awaitable[None]] | None]:
    if turn.plan is None:
        return None, None
    capture = StreamCapture(services.capture, turn.plan, anthropic_turn.AnthropicStreamAccumulator())

    def on_data(payload: bytes) -> None:
        event = _json(payload)
        if event is not None:
            capture.feed(event)

    async def before_done() -> None:
        await capture.finish()

    return on_data, before_done
