"""Anthropic's Messages API: ``POST /v1/messages`` with recall and capture. A model served
by Anthropic is relayed to its Messages API byte for byte; a model at an OpenAI-wire
provider is translated to chat completions and back (both in ``fast_messages``); any other
goes through LiteLLM's Anthropic-messages interface, translated for its provider.

Invariants (as chat's, in Anthropic's shapes):
- The credential is ``x-api-key`` (the Anthropic SDK's) or ``Authorization: Bearer``; both
  map to a tenant exactly as a bearer token does on every other route.
- Every error on this route is Anthropic-shaped: ``{"type": "error", "error": {"type",
  "message"}}`` (``app`` picks the shape by path).
- The caller's body is never mutated; the memory block is one extra text block
  (``proxy.placement``), never merged into the caller's text, without ``cache_control``;
  the caller's ``cache_control`` breakpoints stay on the blocks they were on.
- Capture is planned from the caller's own messages (``proxy.anthropic_turn``).
- A stream relays LiteLLM's SSE bytes as they arrive; ``message_stop`` is sent once the turn
  is captured; an error after the first byte ends it with an Anthropic ``error`` event.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from memproxy.api.body import read_json_object, require_str
from memproxy.api.deps import ServicesDep
from memproxy.api.event_stream import EventStream
from memproxy.api.fast_messages import fast_message, translated_message
from memproxy.api.sse import SSEParser, relay
from memproxy.api.turn import STREAM_HEADERS, PreparedTurn, commit_reply, prepare_turn
from memproxy.auth import Credential
from memproxy.errors import ApiError, anthropic_error_body
from memproxy.outbox.capture import StreamCapture
from memproxy.proxy import anthropic_turn
from memproxy.proxy.anthropic_chat import to_chat
from memproxy.proxy.placement import Placement, place_anthropic, place_chat
from memproxy.scope import parse_request_scope
from memproxy.services import Services

router = APIRouter()

PATHS = ("/v1/messages", "/messages")


def is_anthropic_route(path: str) -> bool:
    return path.rstrip("/") in PATHS


@router.post("/v1/messages")
@router.post("/messages")
async def create_message(request: Request, services: ServicesDep) -> Response:
    credential = authenticate(request, services)
    body = await read_json_object(request, services.settings.server.max_body_bytes)
    validate_messages_body(body)
    metadata = body.get("metadata")
    body_user = metadata.get("user_id") if isinstance(metadata, dict) else None
    request_scope = parse_request_scope(credential.tenant, dict(request.headers), body_user)
    request.state.scope_info = request_scope
    native = services.fast_paths.messages_route(body["model"], credential)
    openai_wire = services.fast_paths.route(body["model"], credential) if native is None else None
    # Translated to chat, the memory block is a system message as on chat, not a block of the user turn.
    place = place_anthropic if openai_wire is None else _place_as_chat
    turn = await prepare_turn(
        services, body, request_scope,
        query=anthropic_turn.query_text(body), place=place, inputs=anthropic_turn.new_input(body),
    )  # fmt: skip
    headers = {k.lower(): v for k, v in request.headers.items()}
    if native is not None:  # Anthropic's own Messages API: relayed byte for byte
        return await fast_message(services, native, turn, bool(body.get("stream")), headers)
    if openai_wire is not None:  # an OpenAI-wire provider: translated to chat and back
        return await translated_message(services, openai_wire, body, turn, bool(body.get("stream")))
    with services.metrics.time_upstream(streamed=bool(body.get("stream"))):
        answer = await services.surfaces.create_message(turn.forwarded, credential, headers)
    if body.get("stream"):
        return _stream(services, answer, turn)
    payload = dict(answer) if not hasattr(answer, "model_dump") else answer.model_dump(exclude_none=True)
    reply_headers = await commit_reply(services, turn, anthropic_turn.reply_from_message(payload))
    return JSONResponse(payload, headers=reply_headers)


def _place_as_chat(body: dict[str, Any], text: str, placement: Placement) -> dict[str, Any]:
    return place_chat(to_chat(body), text, placement)


def authenticate(request: Request, services: Services) -> Credential:
    """``x-api-key`` or ``Authorization``, the same tenant rules either way."""
    authorization = request.headers.get("authorization")
    api_key = request.headers.get("x-api-key", "").strip()
    if not authorization and api_key:
        authorization = f"Bearer {api_key}"
    try:
        credential = services.auth.authenticate(authorization)
    except ApiError as exc:
        if exc.code != "missing_api_key":
            raise
        # Anthropic's SDKs send the key as x-api-key: name that header first.
        raise ApiError(401, "You didn't provide an API key. Send it as 'x-api-key: <key>' (as Anthropic's "
                       "SDKs do) or 'Authorization: Bearer <key>'.", code="missing_api_key") from None  # fmt: skip
    request.state.tenant_hash = credential.tenant_hash
    return credential


def validate_messages_body(body: dict[str, Any]) -> None:
    """The checks Anthropic makes before anything is forwarded."""
    require_str(body, "model")
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise ApiError(400, "max_tokens: a positive integer is required.", param="max_tokens")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages: a non-empty array is required.", param="messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            raise ApiError(400, f"messages.{i}: an object with role 'user' or 'assistant' is required.",
                           param=f"messages.{i}")  # fmt: skip
    if "stream" in body and not isinstance(body["stream"], bool):
        raise ApiError(400, "stream: a boolean is required.", param="stream")


def _stream(services: Services, stream: Any, turn: PreparedTurn) -> Response:
    capture = None
    if turn.plan is not None:
        capture = StreamCapture(services.capture, turn.plan, anthropic_turn.AnthropicStreamAccumulator())
    parser = SSEParser()

    def frames(chunk: Any) -> list[tuple[bytes, dict[str, Any]]]:
        return parser.feed(chunk if isinstance(chunk, bytes) else str(chunk).encode())

    events = relay(stream, frames, terminal=frozenset({"message_stop"}), capture=capture,
                   error_event=anthropic_error_body)  # fmt: skip
    return EventStream(events, media_type="text/event-stream", headers={**turn.headers, **STREAM_HEADERS})
