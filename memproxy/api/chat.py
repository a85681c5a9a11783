"""``POST /v1/chat/completions``: recall → forward (fast path or LiteLLM) → relay → capture.

An OpenAI-wire route (``memproxy.upstream.fastpath``) is relayed byte for byte by ``fast_chat``;
every other route goes through LiteLLM here.

Invariants:
- The caller's body is never mutated; what is forwarded is a copy with, at most, one
  injected system message (recall).
- A streamed answer is relayed chunk by chunk as it arrives; nothing waits for the whole
  answer. An error after the first byte is sent as a final ``data: {"error": …}`` event.
- When the client goes away mid-stream, the upstream stream is closed (cancelled).
- Capture (``memproxy.outbox.capture``) is planned from the caller's own body, so the injected
  memory message is never captured. A non-streamed turn is committed before the
  response is returned; a streamed one once the upstream stream completed, before
  ``[DONE]``; failed and aborted completions are not captured.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from memproxy.api.body import parse_json_object, read_bytes, validate_chat_body
from memproxy.api.deps import CredentialDep, ServicesDep
from memproxy.api.event_stream import EventStream
from memproxy.api.fast_chat import fast_chat, outgoing_body
from memproxy.api.sse import close_stream
from memproxy.errors import ApiError
from memproxy.outbox.capture import HEADER as CAPTURE_RESPONSE_HEADER
from memproxy.outbox.capture import OFF as CAPTURE_OFF
from memproxy.outbox.capture import PlannedCapture, StreamCapture, reply_from_response
from memproxy.proxy.recall import ERROR_HEADER as RECALL_ERROR_HEADER
from memproxy.proxy.recall import RECALLED_HEADER
from memproxy.scope import RequestScope, parse_request_scope
from memproxy.services import Services
from memproxy.upstream.provider import to_api_error

log = logging.getLogger("memproxy.api.chat")

router = APIRouter()

# LiteLLM adds these to OpenAI's objects; they are not part of the API we promise.
_LITELLM_ONLY_KEYS = frozenset({"provider_specific_fields"})


def openai_json(obj: Any, *, exclude_none: bool = False) -> dict[str, Any]:
    data = obj.model_dump(exclude_none=exclude_none) if hasattr(obj, "model_dump") else dict(obj)
    cleaned: dict[str, Any] = _strip(data)
    return cleaned


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in _LITELLM_ONLY_KEYS}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


@router.post("/v1/chat/completions")
@router.post("/chat/completions")
async def chat_completions(request: Request, credential: CredentialDep, services: ServicesDep) -> Response:
    raw = await read_bytes(request, services.settings.server.max_body_bytes)
    body = parse_json_object(raw)
    validate_chat_body(body)
    request_scope = parse_request_scope(credential.tenant, dict(request.headers), body.get("user"))
    forwarded, headers = await _recall(services, body, request_scope)
    request.state.scope_info = request_scope
    # Planned from the caller's own body: the injected memory message is never captured.
    plan = services.capture.plan(request_scope, body)
    headers[CAPTURE_RESPONSE_HEADER] = plan.job_id if plan else CAPTURE_OFF
    route = services.fast_paths.route(body["model"], credential)
    if route is not None:  # an OpenAI-wire provider: relayed byte for byte
        outgoing = outgoing_body(raw, body, forwarded, route)
        return await fast_chat(services, route, outgoing, bool(body.get("stream")), headers, plan)
    if body.get("stream"):
        return await _stream(services, credential, forwarded, headers, plan)
    with services.metrics.time_upstream(streamed=False):
        response = await services.upstream.chat(forwarded, credential)
    payload = openai_json(response)
    if plan is not None:  # committed before the answer is returned; a failure only changes the header
        headers[CAPTURE_RESPONSE_HEADER] = await services.capture.commit(plan, reply_from_response(payload))
    return JSONResponse(payload, headers=headers)


async def _recall(
    services: Services, body: dict[str, Any], request_scope: RequestScope
) -> tuple[dict[str, Any], dict[str, str]]:
    """The body to forward (with memories when recall is on) and the recall headers."""
    if not (request_scope.memory_on and request_scope.recall):
        return body, {RECALLED_HEADER: "0"}
    with services.metrics.time_recall():
        forwarded, recalled, error = await services.recaller.prepare(body, request_scope)
    services.metrics.observe_recalled(recalled)
    headers = {RECALLED_HEADER: str(recalled)}
    if error is not None:
        services.metrics.recall_failed()
        headers[RECALL_ERROR_HEADER] = error
    return forwarded, headers


async def _stream(
    services: Any,
    credential: Any,
    forwarded: dict[str, Any],
    headers: dict[str, str],
    plan: PlannedCapture | None,
) -> Response:
    # Errors before the first chunk (auth, rate limit, timeout) still get a real status code.
    with services.metrics.time_upstream(streamed=True):
        stream = await services.upstream.chat(forwarded, credential)
    capture = StreamCapture(services.capture, plan) if plan is not None else None
    return EventStream(
        _relay(stream, capture),
        media_type="text/event-stream",
        headers={**headers, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _relay(stream: Any, capture: StreamCapture | None = None) -> AsyncIterator[bytes]:
    try:
        async for chunk in stream:
            data = openai_json(chunk, exclude_none=True)
            if capture is not None:
                capture.feed(data)
            yield b"data: " + json.dumps(data).encode() + b"\n\n"
        if capture is not None:  # the upstream stream completed: capture before [DONE]
            await capture.finish()
        yield b"data: [DONE]\n\n"
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        error = to_api_error(exc) if not isinstance(exc, ApiError) else exc
        log.warning("stream failed after it began: %s", error.message)
        yield b"data: " + json.dumps(error.body()).encode() + b"\n\n"
    finally:
        await close_stream(stream)
