"""OpenAI's Responses API as a surface: ``POST /v1/responses`` with recall and capture, and
``GET``/``DELETE /v1/responses/{id}`` proxied.

- Memory block: its own developer message item in ``input`` (``proxy.placement``).
- Capture: the caller's own ``input`` (``proxy.responses_turn``), so with ``previous_response_id``
  the history kept at the provider is never captured again.
- A provider that serves the Responses API itself (only ``openai``: OpenAI and any server named by
  ``upstream.api_base`` or an alias's ``api_base``, where LiteLLM too sends ``{base}/responses`` as
  is) gets the turn relayed byte for byte; every other goes through ``litellm.aresponses``, which
  translates to chat for the other providers. A LiteLLM response id (from its path) means nothing
  to the provider, so a turn continuing one stays on LiteLLM's path.
- A stream's final event (``response.completed``, ``.incomplete``, ``.failed``) goes out once the
  turn is captured; a failure after the first byte ends it with the API's own ``error`` event
  (``{"type": "error", "code", "message", "param", "sequence_number"}``), numbered after the last.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any, ClassVar
from urllib.parse import quote

from fastapi import APIRouter
from starlette.responses import JSONResponse, Response

from memproxy.api.body import require_str
from memproxy.api.deps import CredentialDep
from memproxy.api.openapi import ID, MESSAGE, PROVIDER_FIELDS
from memproxy.api.pipeline import Pipeline, PipelineDep
from memproxy.api.surface import Providers, Surface, Transport
from memproxy.api.transports import ByteRelay, ThroughLiteLLM
from memproxy.auth import Credential
from memproxy.errors import ApiError
from memproxy.proxy import responses_turn
from memproxy.proxy.placement import Placement, place_responses
from memproxy.upstream.fastpath import FastRoute
from memproxy.upstream.surfaces import dump, provider_error
from memproxy.wire.sse import Piece, json_object, typed_frame

PATH = "/responses"
NATIVE_PROVIDERS = frozenset({"openai"})
TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
_SEQUENCE = re.compile(rb'"sequence_number"\s*:\s*(\d+)')
# LiteLLM's additions to OpenAI's objects; not part of the API.
_LITELLM_ONLY_KEYS = frozenset({"provider_specific_fields", "cost", "_hidden_params"})

router = APIRouter()


def clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items() if k not in _LITELLM_ONLY_KEYS}
    if isinstance(value, list):
        return [clean(v) for v in value]
    return value


def serves_responses(route: FastRoute | None) -> bool:
    return route is not None and route.provider in NATIVE_PROVIDERS


def litellm_id(response_id: str) -> bool:
    """True for the ids LiteLLM hands out on its path (``resp_`` + base64 of "litellm:…"):
    those responses are fetched and deleted through LiteLLM, which knows their provider."""
    try:
        decoded = base64.b64decode(response_id.removeprefix("resp_") + "==", validate=False)
    except (ValueError, binascii.Error):
        return False
    return decoded.startswith(b"litellm:")


def is_terminal(payload: bytes) -> bool:
    # Most events are deltas: only payloads naming a terminal type are parsed here.
    if not any(kind.encode() in payload for kind in TERMINAL):
        return False
    event = json_object(payload)
    return event is not None and event.get("type") in TERMINAL


def _event_piece(event: Any) -> list[Piece]:
    data = clean(dump(event))
    return [Piece(typed_frame(data), [data], final=data.get("type") in TERMINAL)]


class ResponsesSurface(Surface):
    name = "responses"
    operation = "create_response"
    request_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "required": ["model", "input"],
        "properties": {**PROVIDER_FIELDS, "user": ID, "input": {"oneOf": [
            {"type": "string", "minLength": 1}, {"type": "array", "minItems": 1, "items": MESSAGE}]}},
    }  # fmt: skip
    paths = ("/v1/responses", "/responses")

    def validate(self, body: dict[str, Any]) -> None:
        """The checks OpenAI makes before anything is forwarded."""
        require_str(body, "model")
        raw = body.get("input")
        if raw is not None and not isinstance(raw, str | list):
            raise ApiError(
                400, "'input' must be a string or an array of items.", param="input", code="invalid_type"
            )
        if isinstance(raw, list) and not all(isinstance(item, dict) for item in raw):
            raise ApiError(
                400, "Every item of 'input' must be an object.", param="input", code="invalid_type"
            )
        if "stream" in body and not isinstance(body["stream"], bool):
            raise ApiError(400, "'stream' must be a boolean.", param="stream", code="invalid_type")

    def query(self, body: dict[str, Any]) -> str:
        return responses_turn.query_text(body)

    def inputs(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        return responses_turn.new_input(body)

    def transport(self, body: dict[str, Any], credential: Credential, providers: Providers) -> Transport:
        route = providers.fast_paths.route(body["model"], credential)
        previous = body.get("previous_response_id")
        if serves_responses(route) and not (isinstance(previous, str) and litellm_id(previous)):
            assert route is not None
            return ByteRelay(providers.relay, route, PATH, is_final=is_terminal)

        async def call(forwarded: dict[str, Any]) -> Any:
            return await providers.litellm_surfaces.create_response(forwarded, credential)

        return ThroughLiteLLM(call, content=lambda answer: clean(dump(answer)), cut=_event_piece,
                              error=provider_error)  # fmt: skip

    def place(
        self, body: dict[str, Any], text: str, placement: Placement, transport: Transport
    ) -> dict[str, Any]:
        return place_responses(body, text, placement)

    def reply_of(self, answer: dict[str, Any]) -> dict[str, Any] | None:
        return responses_turn.reply_from_response(answer)

    def accumulator(self) -> responses_turn.ResponsesStreamAccumulator:
        return responses_turn.ResponsesStreamAccumulator()

    def error_frame(self, error: ApiError, last: bytes) -> bytes:
        numbers = _SEQUENCE.findall(last)
        data = {"type": "error", "code": error.code or error.type, "message": error.message,
                "param": error.param, "sequence_number": (int(numbers[-1]) if numbers else 0) + 1}  # fmt: skip
        return b"event: error\ndata: " + json.dumps(data).encode() + b"\n\n"


SURFACE = ResponsesSurface()


@router.get("/v1/responses/{response_id}")
@router.get("/responses/{response_id}")
async def get_response(response_id: str, credential: CredentialDep, parts: PipelineDep) -> Response:
    return await _stored(parts, credential, "GET", response_id)


@router.delete("/v1/responses/{response_id}")
@router.delete("/responses/{response_id}")
async def delete_response(response_id: str, credential: CredentialDep, parts: PipelineDep) -> Response:
    return await _stored(parts, credential, "DELETE", response_id)


async def _stored(parts: Pipeline, credential: Credential, method: str, response_id: str) -> Response:
    """A stored response, fetched or deleted where it lives: at the provider itself, or through
    LiteLLM for the ids LiteLLM handed out."""
    route = parts.providers.fast_paths.stored_route(credential)
    if route is not None and not litellm_id(response_id):
        return await _fast_stored(parts, route, method, response_id)
    stored = await parts.providers.litellm_surfaces.stored_response(method, response_id, credential)
    return JSONResponse(clean(stored))


async def _fast_stored(parts: Pipeline, route: FastRoute, method: str, response_id: str) -> Response:
    """``GET``/``DELETE`` a stored response at the provider, relayed as it answers."""
    path = f"{PATH}/{quote(response_id, safe='')}"
    with parts.metrics.time_upstream(streamed=False, path="fast"):
        reply = await parts.providers.relay.send(route, path, None, stream=False, method=method)
    return Response(reply.body, status_code=reply.status, headers=reply.headers)
