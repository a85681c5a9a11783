"""Anthropic's Messages API (``POST /v1/messages``) as a surface.

Where a turn goes: a model served by Anthropic is relayed to its Messages API byte for byte (the
caller's ``anthropic-version`` and ``anthropic-beta`` headers with it); a model at an OpenAI-wire
provider is translated to chat completions and back (``ToChat``, ``proxy.anthropic_chat``);
any other goes through LiteLLM's Anthropic-messages interface, translated for its provider.

Invariants (as chat's, in Anthropic's shapes):
- The credential is ``x-api-key`` (the Anthropic SDK's) or ``Authorization: Bearer``; both map to a
  tenant exactly as a bearer token does on every other route.
- Every error on these paths is Anthropic-shaped: ``{"type": "error", "error": {"type", "message"}}``.
- The memory block is one extra text block (``proxy.placement``), never merged into the caller's
  text, without ``cache_control``; the caller's breakpoints stay on the blocks they were on.
  Translated to chat, it is a system message as on chat.
- Capture is planned from the caller's own messages (``proxy.anthropic_turn``); a stream is
  captured before ``message_stop`` goes out and ends with Anthropic's ``error`` event when it
  fails after the first byte.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, ClassVar

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from memproxy.api.body import require_str
from memproxy.api.openapi import ID, PROVIDER_FIELDS
from memproxy.api.surface import Outgoing, Providers, Streamed, Surface, Transport, Whole
from memproxy.api.transports import ByteRelay, ThroughLiteLLM
from memproxy.auth import Authenticator, Credential
from memproxy.errors import ApiError, anthropic_error_body
from memproxy.proxy import anthropic_turn
from memproxy.proxy.anthropic_chat import ChatStreamToEvents, frame, to_chat, to_message
from memproxy.proxy.placement import Placement, place_anthropic, place_chat
from memproxy.upstream.fastpath import FastRoute
from memproxy.upstream.relay import Relay, Reply, provider_error, stream_error
from memproxy.upstream.surfaces import provider_error as litellm_error
from memproxy.wire.sse import DONE, Piece, SSEParser, data_lines, json_object, split_events

PATH = "/v1/messages"
CHAT_PATH = "/chat/completions"
OPENAI_API = "https://api.openai.com/v1"
# The version the Anthropic SDK sends; used only when a caller sends none.
DEFAULT_VERSION = "2023-06-01"
_PASSED_REQUEST_HEADERS = ("anthropic-version", "anthropic-beta")


def is_stop(payload: bytes) -> bool:
    if b"message_stop" not in payload:
        return False
    event = json_object(payload)
    return event is not None and event.get("type") == "message_stop"


def _error_frame(error: ApiError) -> bytes:
    return b"event: error\ndata: " + json.dumps(anthropic_error_body(error)).encode() + b"\n\n"


class MessagesSurface(Surface):
    name = "messages"
    operation = "create_message"
    request_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "required": ["model", "max_tokens", "messages"],
        "properties": {
            **PROVIDER_FIELDS,
            "max_tokens": {"type": "integer", "minimum": 1},
            "metadata": {"type": "object", "properties": {"user_id": ID}},
            "messages": {"type": "array", "minItems": 1, "items": {
                "type": "object", "required": ["role"],
                "properties": {"role": {"enum": ["user", "assistant"]}, "content": {"type": ["string", "array"]}}}},
        },
    }  # fmt: skip
    paths = ("/v1/messages", "/messages")
    anthropic_errors = True

    def authenticate(self, request: Request, auth: Authenticator) -> Credential:
        """``x-api-key`` or ``Authorization``, the same tenant rules either way."""
        authorization = request.headers.get("authorization")
        api_key = request.headers.get("x-api-key", "").strip()
        if not authorization and api_key:
            authorization = f"Bearer {api_key}"
        try:
            return auth.authenticate(authorization)
        except ApiError as exc:
            if exc.code != "missing_api_key":
                raise
            # Anthropic's SDKs send the key as x-api-key: name that header first.
            raise ApiError(401, "You didn't provide an API key. Send it as 'x-api-key: <key>' (as Anthropic's "
                           "SDKs do) or 'Authorization: Bearer <key>'.", code="missing_api_key") from None  # fmt: skip

    def validate(self, body: dict[str, Any]) -> None:
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

    def user_of(self, body: dict[str, Any]) -> Any:
        metadata = body.get("metadata")
        return metadata.get("user_id") if isinstance(metadata, dict) else None

    def query(self, body: dict[str, Any]) -> str:
        return anthropic_turn.query_text(body)

    def inputs(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        return anthropic_turn.new_input(body)

    def transport(self, body: dict[str, Any], credential: Credential, providers: Providers) -> Transport:
        native = providers.fast_paths.messages_route(body["model"], credential)
        if native is not None:
            return _Native(providers.relay, native)
        openai_wire = providers.fast_paths.route(body["model"], credential)
        if openai_wire is not None:
            return ToChat(providers.relay, openai_wire)
        return _ThroughLiteLLM(providers, credential)

    def place(
        self, body: dict[str, Any], text: str, placement: Placement, transport: Transport
    ) -> dict[str, Any]:
        if isinstance(transport, ToChat):  # translated to chat: the block is a system message, as on chat
            return place_chat(to_chat(body), text, placement)
        return place_anthropic(body, text, placement)

    def reply_of(self, answer: dict[str, Any]) -> dict[str, Any] | None:
        return anthropic_turn.reply_from_message(answer)

    def accumulator(self) -> anthropic_turn.AnthropicStreamAccumulator:
        return anthropic_turn.AnthropicStreamAccumulator()

    def error_frame(self, error: ApiError, last: bytes) -> bytes:
        return _error_frame(error)


SURFACE = MessagesSurface()


class _Native(ByteRelay):
    """Anthropic's own Messages API, with the caller's version and beta headers."""

    def __init__(self, relay: Relay, route: FastRoute) -> None:
        super().__init__(relay, route, PATH, is_final=is_stop)

    async def send(self, outgoing: Outgoing) -> Whole | Streamed | Response:
        passed = {name: outgoing.request_headers[name] for name in _PASSED_REQUEST_HEADERS
                  if name in outgoing.request_headers}  # fmt: skip
        passed.setdefault("anthropic-version", DEFAULT_VERSION)
        self._extra_headers = passed
        return await super().send(outgoing)


class _ThroughLiteLLM(ThroughLiteLLM):
    def __init__(self, providers: Providers, credential: Credential) -> None:
        self._headers: dict[str, str] = {}
        parser = SSEParser()

        async def call(forwarded: dict[str, Any]) -> Any:
            return await providers.litellm_surfaces.create_message(forwarded, credential, self._headers)

        def cut(chunk: Any) -> list[Piece]:
            frames = parser.feed(chunk if isinstance(chunk, bytes) else str(chunk).encode())
            return [Piece(raw, [event], final=event.get("type") == "message_stop") for raw, event in frames]

        def content(answer: Any) -> dict[str, Any]:
            data: dict[str, Any] = (
                answer.model_dump(exclude_none=True) if hasattr(answer, "model_dump") else dict(answer)
            )
            return data

        super().__init__(call, content=content, cut=cut, error=litellm_error)

    async def send(self, outgoing: Outgoing) -> Whole | Streamed | Response:
        self._headers = outgoing.request_headers
        return await super().send(outgoing)


class ToChat:
    """``/v1/messages`` to an OpenAI-wire provider: the forwarded body is already chat (placed as
    chat when memories were injected, ``to_chat`` otherwise), relayed to ``/chat/completions``,
    and the answer translated back (errors in Anthropic's shape)."""

    label = "fast"

    def __init__(self, relay: Relay, route: FastRoute) -> None:
        self.relay = relay
        self.route = route

    async def send(self, outgoing: Outgoing) -> Whole | Streamed | Response:
        body = outgoing.body
        chat = for_provider(
            outgoing.forwarded if outgoing.forwarded is not body else to_chat(body), self.route
        )
        payload = json.dumps({**chat, "model": self.route.model}).encode()
        reply = await self.relay.send(self.route, CHAT_PATH, payload, stream=outgoing.stream)
        passed = {k: v for k, v in reply.headers.items() if k.lower() != "content-type"}
        if reply.status >= 400:
            error = provider_error(reply.status, json_object(reply.body or b""))
            return JSONResponse(anthropic_error_body(error), status_code=error.status, headers=passed)
        if reply.streaming:
            return Streamed(_TranslatedStream(reply, str(body["model"])), reply.status, passed)
        data = json_object(reply.body or b"")
        if data is None:
            error = provider_error(reply.status, None)
            return JSONResponse(anthropic_error_body(error), status_code=error.status)
        message = to_message(data, str(body["model"]))
        return Whole(message, message, 200, passed)


def for_provider(chat: dict[str, Any], route: FastRoute) -> dict[str, Any]:
    """OpenAI's own API takes the token limit as ``max_completion_tokens`` (its reasoning models
    refuse ``max_tokens``); OpenAI-compatible servers know ``max_tokens``."""
    if route.base_url != OPENAI_API or "max_tokens" not in chat:
        return chat
    limited = {k: v for k, v in chat.items() if k != "max_tokens"}
    return {**limited, "max_completion_tokens": chat["max_tokens"]}


class _TranslatedStream:
    """The provider's chunk stream as Anthropic events, ``message_stop`` its final piece."""

    def __init__(self, reply: Reply, model: str) -> None:
        self.reply = reply
        self.translator = ChatStreamToEvents(model)

    async def pieces(self) -> AsyncIterator[Piece]:
        pending = b""
        async for chunk in self.reply.chunks():
            pending += chunk
            cut = split_events(pending)
            events, pending = pending[:cut], pending[cut:]
            out, done = self._translate(events)
            if out:
                yield Piece(b"".join(frame(event) for event in out), [data for _, data in out])
            if done:
                break
        if not self.translator.finished:
            raise ApiError(502, "the provider's stream ended before its answer did", type="upstream_error")
        closing = self.translator.finish()
        yield Piece(b"".join(frame(event) for event in closing[:-1]), [data for _, data in closing[:-1]])
        yield Piece(frame(closing[-1]), [closing[-1][1]], final=True)
        self.reply.release()

    def _translate(self, events: bytes) -> tuple[list[tuple[str, dict[str, Any]]], bool]:
        out: list[tuple[str, dict[str, Any]]] = []
        for _, payload in data_lines(events):
            if payload == DONE:
                return out, True
            data = json_object(payload)
            if data is not None and isinstance(data.get("error"), dict):
                raise provider_error(502, data)
            if data is not None:
                out += self.translator.feed(data)
        return out, False

    def error(self, exc: Exception) -> ApiError:
        return stream_error(exc)

    async def close(self) -> None:
        self.reply.close()
