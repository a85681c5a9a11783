"""``POST /v1/responses`` on the fast path: relayed byte for byte to a provider that serves
OpenAI's Responses API itself.

Only the ``openai`` provider qualifies (OpenAI and any OpenAI-compatible server named by
``upstream.api_base`` or an alias's ``api_base``), which is where LiteLLM too sends the
request to ``{base}/responses`` as is; for the other OpenAI-wire providers LiteLLM
translates Responses into chat completions, so they keep its path.

Invariants (the same as ``fast_chat`` and the LiteLLM path in ``responses``):
- The forwarded body is the caller's, plus at most the injected developer item, with the
  model named as the provider knows it. Status, body and SSE bytes are the provider's;
  memproxy adds only its ``X-Memproxy-*`` headers to a successful answer.
- Capture reads the answer as it passes and never changes it (``fast_surface.relay_turn``):
  a streamed turn is committed before ``response.completed`` (or ``.incomplete``/``.failed``)
  goes out. An error answer or a cut stream is not captured.
- A failure after the first byte ends the stream with the Responses API's own ``error``
  event (``{"type": "error", "code", "message", "param", "sequence_number"}``).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from urllib.parse import quote

from starlette.responses import Response

from memproxy.api.fast_surface import json_object, relay_turn
from memproxy.api.turn import PreparedTurn
from memproxy.errors import ApiError
from memproxy.proxy import responses_turn
from memproxy.services import Services
from memproxy.upstream.fastpath import FastRoute

RESPONSES_PATH = "/responses"
NATIVE_PROVIDERS = frozenset({"openai"})
TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
_SEQUENCE = re.compile(rb'"sequence_number"\s*:\s*(\d+)')


def serves_responses(route: FastRoute | None) -> bool:
    return route is not None and route.provider in NATIVE_PROVIDERS


async def fast_response(services: Services, route: FastRoute, turn: PreparedTurn, stream: bool) -> Response:
    frames = _ErrorFrames()
    return await relay_turn(
        services, route, RESPONSES_PATH, turn, stream,
        reply_of=responses_turn.reply_from_response, accumulator=responses_turn.ResponsesStreamAccumulator,
        is_final=_is_terminal, error_frame=frames, observe=frames.see,
    )  # fmt: skip


def litellm_id(response_id: str) -> bool:
    """True for the ids LiteLLM hands out on its path (``resp_`` + base64 of "litellm:…"):
    those responses are fetched and deleted through LiteLLM, which knows their provider."""
    try:
        decoded = base64.b64decode(response_id.removeprefix("resp_") + "==", validate=False)
    except (ValueError, binascii.Error):
        return False
    return decoded.startswith(b"litellm:")


async def fast_stored(services: Services, route: FastRoute, method: str, response_id: str) -> Response:
    """``GET``/``DELETE`` a stored response at the provider, relayed as it answers."""
    path = f"{RESPONSES_PATH}/{quote(response_id, safe='')}"
    with services.metrics.time_upstream(streamed=False, path="fast"):
        reply = await services.relay.send(route, path, None, stream=False, method=method)
    return Response(reply.body, status_code=reply.status, headers=reply.headers)


def _is_terminal(payload: bytes) -> bool:
    # Most events are deltas: only payloads naming a terminal type are parsed here.
    if not any(kind.encode() in payload for kind in TERMINAL):
        return False
    event = json_object(payload)
    return event is not None and event.get("type") in TERMINAL


class _ErrorFrames:
    """The Responses API's ``error`` event, numbered after the last event relayed."""

    def __init__(self) -> None:
        self.sequence = 0

    def see(self, payload: bytes) -> None:
        found = _SEQUENCE.search(payload)
        if found:
            self.sequence = int(found.group(1))

    def __call__(self, error: ApiError) -> bytes:
        data = {"type": "error", "code": error.code or error.type, "message": error.message,
                "param": error.param, "sequence_number": self.sequence + 1}  # fmt: skip
        return b"event: error\ndata: " + json.dumps(data).encode() + b"\n\n"
