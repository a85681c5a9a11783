"""Chat on the fast path: the (possibly memory-augmented) body goes to an OpenAI-wire
provider through ``memproxy.upstream.relay``, and the provider's answer comes back byte for byte.

Invariants (the same guarantees as the LiteLLM path in ``chat``):
- The caller's raw bytes are forwarded as they came when nothing changed (no memories
  injected, the model name is the provider's); otherwise the body is serialized once.
- Status, body and SSE bytes are the provider's; memproxy adds only its own headers
  (``X-Memproxy-*``) to a successful answer, as the LiteLLM path does.
- Capture reads the answer as it passes (``json.loads`` of the body, or of each SSE
  ``data:`` line) and never changes it. A streamed turn is committed before ``[DONE]``
  goes out; an error answer, a cut stream or a client that left is not captured.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.responses import Response

from memproxy.api.event_stream import EventStream
from memproxy.outbox.capture import OFF as CAPTURE_OFF
from memproxy.outbox.capture import PlannedCapture, StreamCapture, reply_from_response
from memproxy.services import Services
from memproxy.upstream.fastpath import FastRoute
from memproxy.upstream.relay import relay_events
from memproxy.wire.headers import CAPTURE_RESULT

log = logging.getLogger("memproxy.api.chat")

CHAT_PATH = "/chat/completions"
STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def outgoing_body(raw: bytes, body: dict[str, Any], forwarded: dict[str, Any], route: FastRoute) -> bytes:
    """What the provider receives: the caller's own bytes when nothing changed."""
    if forwarded is body and route.model == body.get("model"):
        return raw
    return json.dumps({**forwarded, "model": route.model}).encode()


async def fast_chat(services: Services, route: FastRoute, payload: bytes, stream: bool,
                    headers: dict[str, str], plan: PlannedCapture | None) -> Response:  # fmt: skip
    with services.metrics.time_upstream(streamed=stream, path="fast"):
        reply = await services.relay.send(route, CHAT_PATH, payload, stream=stream)
    if reply.status >= 400:  # the provider's error, as it sent it (not captured)
        return Response(reply.body, status_code=reply.status, headers=reply.headers)
    if reply.streaming:
        capture = StreamCapture(services.capture, plan) if plan is not None else None
        on_data, before_done = _stream_hooks(capture)
        return EventStream(
            relay_events(reply, on_data, before_done),
            status_code=reply.status,
            headers={**reply.headers, **headers, **STREAM_HEADERS},
        )
    body = reply.body or b""
    if plan is not None:  # committed before the answer is returned; a failure only changes the header
        headers[CAPTURE_RESULT] = await _commit(services, plan, body)
    return Response(body, status_code=reply.status, headers={**reply.headers, **headers})


async def _commit(services: Services, plan: PlannedCapture, body: bytes) -> str:
    try:
        payload = json.loads(body)
    except ValueError:
        services.capture.not_captured(plan, "the provider's answer is not JSON")
        return CAPTURE_OFF
    reply = reply_from_response(payload) if isinstance(payload, dict) else None
    return await services.capture.commit(plan, reply)


def _stream_hooks(
    capture: StreamCapture | None,
) -> tuple[Callable[[bytes], None] | None, Callable[[], Awaitable[None]] | None]:
    if capture is None:
        return None, None

    def on_data(payload: bytes) -> None:
        try:
            chunk = json.loads(payload)
        except ValueError:
            return  # not a chunk (a comment-like payload): nothing to capture from it
        if isinstance(chunk, dict):
            capture.feed(chunk)

    async def before_done() -> None:
        await capture.finish()

    return on_data, before_done
