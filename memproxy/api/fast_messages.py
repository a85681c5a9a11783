"""``POST /v1/messages`` on the fast path: a model served by Anthropic gets the request
relayed byte for byte to its Messages API; every other model keeps LiteLLM's translation.

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

import json

from starlette.responses import Response

from memproxy.api.fast_surface import json_object, relay_turn
from memproxy.api.turn import PreparedTurn
from memproxy.errors import ApiError, anthropic_error_body
from memproxy.fastpath import FastRoute
from memproxy.proxy import anthropic_turn
from memproxy.services import Services

MESSAGES_PATH = "/v1/messages"
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
