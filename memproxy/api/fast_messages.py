"""``POST /v1/messages`` on the fast path: a model served by Anthropic gets the request
relayed byte for byte to its Messages API (``fast_message``); a model at an OpenAI-wire
provider gets it translated to chat completions and back (``translated_message``,
``proxy.anthropic_chat``); every other model keeps LiteLLM's translation.

Invariants (the same as the LiteLLM path in ``messages``; the relay itself is
``fast_surface.relay_turn``):
- The forwarded body is the caller's, every field included (``cache_control`` breakpoints,
  fields LiteLLM does not know yet), plus at most the memory text block, with the model
  named as the provider knows it. The caller's ``anthropic-version`` and ``anthropic-beta``
  headers go with it. Status, body and SSE bytes are the provider's (its errors are already
  Anthropic-shaped); memproxy adds only its ``X-Memproxy-*`` headers to a successful answer.
- A streamed turn is captured before ``message_stop`` goes out; an error answer or a cut
  stream is not captured. A failure after the first byte ends the stream with Anthropic's
  ``error`` event.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import JSONResponse, Response

from memproxy.api.event_stream import EventStream
from memproxy.api.fast_surface import json_object, relay_turn
from memproxy.api.turn import STREAM_HEADERS, PreparedTurn, commit_reply
from memproxy.errors import ApiError, anthropic_error_body
from memproxy.outbox.capture import StreamCapture
from memproxy.proxy import anthropic_turn
from memproxy.proxy.anthropic_chat import ChatStreamToEvents, Event, frame, to_chat, to_message
from memproxy.services import Services
from memproxy.upstream.fastpath import FastRoute
from memproxy.upstream.provider import unreachable_error
from memproxy.upstream.relay import Reply, data_lines, provider_error, split_events

log = logging.getLogger("memproxy.api.messages")

MESSAGES_PATH = "/v1/messages"
CHAT_PATH = "/chat/completions"
OPENAI_API = "https://api.openai.com/v1"
# The version the Anthropic SDK sends; used only when a caller sends none.
DEFAULT_VERSION = "2023-06-01"
_PASSED_REQUEST_HEADERS = ("anthropic-version", "anthropic-beta")


async def fast_message(
    services: Services, route: FastRoute, turn: PreparedTurn, stream: bool, request_headers: dict[str, str]
) -> Response:
    passed = {name: request_headers[name] for name in _PASSED_REQUEST_HEADERS if name in request_headers}
    passed.setdefault("anthropic-version", DEFAULT_VERSION)
    return await relay_turn(
        services, route, MESSAGES_PATH, turn, stream,
        reply_of=anthropic_turn.reply_from_message, accumulator=anthropic_turn.AnthropicStreamAccumulator,
        is_final=_is_stop, error_frame=_error_frame, extra_headers=passed,
    )  # fmt: skip


def _is_stop(payload: bytes) -> bool:
    if b"message_stop" not in payload:
        return False
    event = json_object(payload)
    return event is not None and event.get("type") == "message_stop"


def _error_frame(error: ApiError) -> bytes:
    return b"event: error\ndata: " + json.dumps(anthropic_error_body(error)).encode() + b"\n\n"


async def translated_message(
    services: Services, route: FastRoute, body: dict[str, Any], turn: PreparedTurn, stream: bool
) -> Response:
    """``/v1/messages`` to an OpenAI-wire provider: translated to chat (``proxy.anthropic_chat``),
    relayed, and the answer translated back. ``turn.forwarded`` is already the chat body when
    memories were injected (the block is a system message, as on chat)."""
    chat = for_provider(turn.forwarded if turn.forwarded is not body else to_chat(body), route)
    payload = json.dumps({**chat, "model": route.model}).encode()
    with services.metrics.time_upstream(streamed=stream, path="fast"):
        reply = await services.relay.send(route, CHAT_PATH, payload, stream=stream)
    passed = {k: v for k, v in reply.headers.items() if k.lower() != "content-type"}
    if reply.status >= 400:
        error = provider_error(reply.status, json_object(reply.body or b""))
        return JSONResponse(anthropic_error_body(error), status_code=error.status, headers=passed)
    if reply.streaming:
        events = _translated_events(services, reply, turn, str(body["model"]))
        return EventStream(events, media_type="text/event-stream",
                           headers={**passed, **turn.headers, **STREAM_HEADERS})  # fmt: skip
    data = json_object(reply.body or b"")
    if data is None:
        error = provider_error(reply.status, None)
        return JSONResponse(anthropic_error_body(error), status_code=error.status)
    message = to_message(data, str(body["model"]))
    headers = await commit_reply(services, turn, anthropic_turn.reply_from_message(message))
    return JSONResponse(message, headers={**passed, **headers})


def for_provider(chat: dict[str, Any], route: FastRoute) -> dict[str, Any]:
    """OpenAI's own API takes the token limit as ``max_completion_tokens`` (its reasoning models
    refuse ``max_tokens``); OpenAI-compatible servers know ``max_tokens``."""
    if route.base_url != OPENAI_API or "max_tokens" not in chat:
        return chat
    limited = {k: v for k, v in chat.items() if k != "max_tokens"}
    return {**limited, "max_completion_tokens": chat["max_tokens"]}


async def _translated_events(
    services: Services, reply: Reply, turn: PreparedTurn, model: str
) -> AsyncIterator[bytes]:
    """The provider's chunk stream as Anthropic events; the turn is captured before ``message_stop``."""
    translator = ChatStreamToEvents(model)
    capture = None
    if turn.plan is not None:
        capture = StreamCapture(services.capture, turn.plan, anthropic_turn.AnthropicStreamAccumulator())
    pending, done = b"", False
    try:
        async for chunk in reply.chunks():
            pending += chunk
            cut = split_events(pending)
            events, pending = pending[:cut], pending[cut:]
            out: list[Event] = []
            for _, payload in data_lines(events):
                if payload == b"[DONE]":
                    done = True
                    break
                data = json_object(payload)
                if data is not None and isinstance(data.get("error"), dict):
                    raise provider_error(502, data)
                if data is not None:
                    out += translator.feed(data)
            if out:
                yield _framed(out, capture)
            if done:
                break
        if not translator.finished:
            raise ApiError(502, "the provider's stream ended before its answer did", type="upstream_error")
        closing = translator.finish()
        yield _framed(closing[:-1], capture)
        if capture is not None:
            await capture.finish()
        yield frame(closing[-1])
        reply.release()
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        error = exc if isinstance(exc, ApiError) else unreachable_error(str(exc) or type(exc).__name__)
        log.warning("translated stream failed after it began: %s", error.message)
        yield _error_frame(error)
    finally:
        reply.close()


def _framed(events: list[Event], capture: StreamCapture | None) -> bytes:
    if capture is not None:
        for _, data in events:
            capture.feed(data)
    return b"".join(frame(event) for event in events)
