"""OpenAI's Responses API: ``POST /v1/responses`` with recall and capture, ``GET``/``DELETE
/v1/responses/{id}`` proxied. A provider that serves the Responses API itself gets the
request relayed byte for byte (``fast_responses``); any other goes through LiteLLM.

Invariants (as chat's):
- The caller's body is never mutated; what is forwarded is a copy with, at most, one
  injected developer message item (``proxy.placement``).
- Capture is planned from the caller's own ``input`` (``proxy.responses_turn``), so the
  injected item is never captured and, with ``previous_response_id``, the history kept at
  the provider is never captured again.
- A stream relays the typed events as they arrive; ``response.completed`` is sent once the
  turn is captured; an error after the first byte ends the stream with an ``error`` event
  (``{"type": "error", "code", "message", "param", "sequence_number"}``).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from memproxy.api.body import read_json_object, require_str
from memproxy.api.deps import CredentialDep, ServicesDep
from memproxy.api.event_stream import EventStream
from memproxy.api.fast_responses import TERMINAL, fast_response, fast_stored, litellm_id, serves_responses
from memproxy.api.sse import frame, relay
from memproxy.api.turn import STREAM_HEADERS, PreparedTurn, commit_reply, prepare_turn
from memproxy.errors import ApiError
from memproxy.outbox.capture import StreamCapture
from memproxy.proxy import responses_turn
from memproxy.proxy.placement import place_responses
from memproxy.scope import parse_request_scope
from memproxy.services import Services
from memproxy.upstream.surfaces import dump

router = APIRouter()

# LiteLLM's additions to OpenAI's objects; not part of the API.
_LITELLM_ONLY_KEYS = frozenset({"provider_specific_fields", "cost", "_hidden_params"})


@router.post("/v1/responses")
@router.post("/responses")
async def create_response(request: Request, credential: CredentialDep, services: ServicesDep) -> Response:
    body = await read_json_object(request, services.settings.server.max_body_bytes)
    validate_responses_body(body)
    request_scope = parse_request_scope(credential.tenant, dict(request.headers), body.get("user"))
    request.state.scope_info = request_scope
    turn = await prepare_turn(
        services, body, request_scope,
        query=responses_turn.query_text(body), place=place_responses, inputs=responses_turn.new_input(body),
    )  # fmt: skip
    route = services.fast_paths.route(body["model"], credential)
    previous = body.get("previous_response_id")
    # A LiteLLM id (from its path) means nothing to the provider: LiteLLM decodes it.
    if serves_responses(route) and not (isinstance(previous, str) and litellm_id(previous)):
        assert route is not None  # a provider with its own Responses API: relayed byte for byte
        return await fast_response(services, route, turn, bool(body.get("stream")))
    with services.metrics.time_upstream(streamed=bool(body.get("stream"))):
        answer = await services.surfaces.create_response(turn.forwarded, credential)
    if body.get("stream"):
        return _stream(services, answer, turn)
    payload = clean(dump(answer))
    headers = await commit_reply(services, turn, responses_turn.reply_from_response(payload))
    return JSONResponse(payload, headers=headers)


@router.get("/v1/responses/{response_id}")
@router.get("/responses/{response_id}")
async def get_response(response_id: str, credential: CredentialDep, services: ServicesDep) -> Response:
    route = services.fast_paths.stored_route(credential)
    if route is not None and not litellm_id(response_id):
        return await fast_stored(services, route, "GET", response_id)
    return JSONResponse(clean(await services.surfaces.get_response(response_id, credential)))


@router.delete("/v1/responses/{response_id}")
@router.delete("/responses/{response_id}")
async def delete_response(response_id: str, credential: CredentialDep, services: ServicesDep) -> Response:
    route = services.fast_paths.stored_route(credential)
    if route is not None and not litellm_id(response_id):
        return await fast_stored(services, route, "DELETE", response_id)
    return JSONResponse(clean(await services.surfaces.delete_response(response_id, credential)))


def validate_responses_body(body: dict[str, Any]) -> None:
    """The checks OpenAI makes before anything is forwarded."""
    require_str(body, "model")
    raw = body.get("input")
    if raw is not None and not isinstance(raw, str | list):
        raise ApiError(
            400, "'input' must be a string or an array of items.", param="input", code="invalid_type"
        )
    if isinstance(raw, list) and not all(isinstance(item, dict) for item in raw):
        raise ApiError(400, "Every item of 'input' must be an object.", param="input", code="invalid_type")
    if "stream" in body and not isinstance(body["stream"], bool):
        raise ApiError(400, "'stream' must be a boolean.", param="stream", code="invalid_type")


def _stream(services: Services, stream: Any, turn: PreparedTurn) -> Response:
    capture = None
    if turn.plan is not None:
        capture = StreamCapture(services.capture, turn.plan, responses_turn.ResponsesStreamAccumulator())
    sequence = [0]

    def frames(event: Any) -> list[tuple[bytes, dict[str, Any]]]:
        data = clean(dump(event))
        sequence[0] = int(data.get("sequence_number") or sequence[0])
        return [(frame(data), data)]

    def error_event(error: ApiError) -> dict[str, Any]:
        return {"type": "error", "code": error.code or error.type, "message": error.message,
                "param": error.param, "sequence_number": sequence[0] + 1}  # fmt: skip

    events = relay(stream, frames, terminal=TERMINAL, error_event=error_event, capture=capture)
    return EventStream(events, media_type="text/event-stream", headers={**turn.headers, **STREAM_HEADERS})


def clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items() if k not in _LITELLM_ONLY_KEYS}
    if isinstance(value, list):
        return [clean(v) for v in value]
    return value
