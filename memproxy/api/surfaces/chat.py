"""Chat completions (``POST /v1/chat/completions``) as a surface.

- Memory block: its own system message (``proxy.placement.place_chat``).
- Capture: the user and tool messages after the last assistant message, and choice 0's
  assistant message (``outbox.capture``); a stream's reply is rebuilt from its chunks.
- An OpenAI-wire provider (``upstream.fastpath``) gets the turn relayed byte for byte; every
  other goes through ``litellm.acompletion``.
- A stream that fails after its first byte ends with ``data: {"error": …}``, as OpenAI's does.
"""

from __future__ import annotations

from typing import Any, ClassVar

from memproxy.api.body import validate_chat_body
from memproxy.api.openapi import ID, MESSAGE, PROVIDER_FIELDS
from memproxy.api.surface import Providers, Surface, Transport
from memproxy.api.transports import ByteRelay, ThroughLiteLLM
from memproxy.auth import Credential
from memproxy.errors import ApiError
from memproxy.outbox import capture
from memproxy.proxy.placement import Placement, place_chat
from memproxy.proxy.recall import QUERY_MAX_CHARS
from memproxy.upstream.provider import to_api_error
from memproxy.wire.message_text import latest_user_text
from memproxy.wire.sse import DONE_FRAME, Piece, data_frame

PATH = "/chat/completions"
# LiteLLM adds these to OpenAI's objects; they are not part of the API we promise.
_LITELLM_ONLY_KEYS = frozenset({"provider_specific_fields"})


def openai_json(obj: Any, *, exclude_none: bool = False) -> dict[str, Any]:
    """A LiteLLM chat object as OpenAI's JSON (LiteLLM's own additions removed)."""
    data = obj.model_dump(exclude_none=exclude_none) if hasattr(obj, "model_dump") else dict(obj)
    cleaned: dict[str, Any] = _strip(data)
    return cleaned


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in _LITELLM_ONLY_KEYS}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _chunk_piece(chunk: Any) -> list[Piece]:
    data = openai_json(chunk, exclude_none=True)
    return [Piece(data_frame(data), [data])]


class ChatSurface(Surface):
    name = "chat"
    operation = "chat_completions"
    request_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "required": ["model", "messages"],
        "properties": {
            **PROVIDER_FIELDS,
            "user": ID,
            "messages": {"type": "array", "minItems": 1, "items": MESSAGE},
        },
    }
    paths = ("/v1/chat/completions", "/chat/completions")

    def validate(self, body: dict[str, Any]) -> None:
        validate_chat_body(body)

    def query(self, body: dict[str, Any]) -> str:
        return latest_user_text(body["messages"], QUERY_MAX_CHARS)

    def inputs(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        return capture.new_input(body["messages"])

    def transport(self, body: dict[str, Any], credential: Credential, providers: Providers) -> Transport:
        route = providers.fast_paths.route(body["model"], credential)
        if route is not None:
            return ByteRelay(providers.relay, route, PATH)

        async def call(forwarded: dict[str, Any]) -> Any:
            return await providers.litellm.chat(forwarded, credential)

        trailer = Piece(DONE_FRAME, [], final=True)
        return ThroughLiteLLM(
            call, content=openai_json, cut=_chunk_piece, error=to_api_error, trailer=trailer
        )

    def place(
        self, body: dict[str, Any], text: str, placement: Placement, transport: Transport
    ) -> dict[str, Any]:
        return place_chat(body, text, placement)

    def reply_of(self, answer: dict[str, Any]) -> dict[str, Any] | None:
        return capture.reply_from_response(answer)

    def accumulator(self) -> capture.StreamAccumulator:
        return capture.StreamAccumulator()

    def error_frame(self, error: ApiError, last: bytes) -> bytes:
        return data_frame(error.body())


SURFACE = ChatSurface()
