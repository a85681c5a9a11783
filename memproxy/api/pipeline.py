"""The one pipeline every API surface's turn runs through:

read body → validate → scope → transport (fast path or LiteLLM) → recall → budget → placement →
capture plan → send → answer (captured before it is returned) or stream (``stream_relay.relay``).

The surface (``api.surface.Surface``) supplies everything that differs by API shape; the
headers (``X-Memproxy-Recalled``, ``-Recall-Error``, ``-Capture``), the metrics, fail-open
recall and capture are the same on every surface and both paths.

Invariants:
- The caller's body is never mutated; what is forwarded is the surface's placed copy.
- Capture is planned from the caller's own body before the provider is called (so a streamed
  answer's headers carry the job id); a complete answer is committed before it is returned, a
  stream before its final event. Refusals, failed, cut and client-aborted answers are not captured.
- Recall never fails a request: its error goes in ``X-Memproxy-Recall-Error`` and the turn is
  forwarded without memories.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from starlette.responses import JSONResponse, Response

from memproxy.api.body import parse_json_object, read_bytes
from memproxy.api.deps import running_part
from memproxy.api.event_stream import EventStream
from memproxy.api.stream_relay import relay
from memproxy.api.surface import Outgoing, Providers, Streamed, Surface, Transport, Whole
from memproxy.auth import Authenticator
from memproxy.config import Settings
from memproxy.metrics import Metrics
from memproxy.outbox.capture import OFF as CAPTURE_OFF
from memproxy.outbox.capture import Capture, PlannedCapture, StreamCapture
from memproxy.proxy.recall import Recaller
from memproxy.scope import RequestScope, parse_request_scope
from memproxy.services import Services
from memproxy.wire.headers import CAPTURE_RESULT, RECALL_ERROR, RECALLED

STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


@dataclass
class Turn:
    """The body to forward, the capture plan and the headers of the answer."""

    forwarded: dict[str, Any]
    plan: PlannedCapture | None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Pipeline:
    """The parts a turn uses, and nothing else of ``Services`` (built once, in the app's lifespan)."""

    settings: Settings
    auth: Authenticator
    recaller: Recaller
    capture: Capture
    metrics: Metrics
    providers: Providers

    @classmethod
    def of(cls, services: Services) -> Pipeline:
        providers = Providers(services.fast_paths, services.relay, services.upstream, services.surfaces)
        return cls(services.settings, services.auth, services.recaller, services.capture, services.metrics,
                   providers)  # fmt: skip


async def get_pipeline(request: Request) -> Pipeline:
    # ``async def``, as every dependency in ``deps``: no thread hop.
    pipeline: Pipeline = running_part(request, "pipeline")
    return pipeline


PipelineDep = Annotated[Pipeline, Depends(get_pipeline)]


def surface_router(surface: Surface) -> APIRouter:
    """The surface's POST routes, each running ``serve_turn``."""
    router = APIRouter()

    async def create(request: Request, pipeline: PipelineDep) -> Response:
        return await serve_turn(surface, request, pipeline)

    create.__name__ = surface.operation  # the operationId in /openapi.json
    for path in surface.paths:
        router.add_api_route(path, create, methods=["POST"])
    return router


async def serve_turn(surface: Surface, request: Request, parts: Pipeline) -> Response:
    credential = surface.authenticate(request, parts.auth)
    # For the access log: the tenant only ever appears there as this short hash.
    request.state.tenant_hash = credential.tenant_hash
    raw = await read_bytes(request, parts.settings.server.max_body_bytes)
    body = parse_json_object(raw)
    surface.validate(body)
    # Starlette's names are lower-case already; a header sent twice counts once, first value first
    # (as on every route: ``scope.parse_request_scope``).
    headers = dict(request.headers)
    request_scope = parse_request_scope(credential.tenant, headers, surface.user_of(body))
    request.state.scope_info = request_scope
    transport = surface.transport(body, credential, parts.providers)
    turn = await prepare_turn(parts, surface, body, request_scope, transport)
    outgoing = Outgoing(raw, body, turn.forwarded, credential, headers, watch=turn.plan is not None)
    with parts.metrics.time_upstream(streamed=outgoing.stream, path=transport.label):
        answer = await transport.send(outgoing)
    if isinstance(answer, Response):
        return answer
    if isinstance(answer, Streamed):
        capture = None
        if turn.plan is not None:
            capture = StreamCapture(parts.capture, turn.plan, surface.accumulator())
        return EventStream(relay(answer.source, capture, surface.error_frame, surface.name), status_code=answer.status,
                           media_type="text/event-stream",
                           headers={**answer.headers, **turn.headers, **STREAM_HEADERS})  # fmt: skip
    await commit_whole(parts, surface, turn, answer)
    if isinstance(answer.content, dict):
        return JSONResponse(
            answer.content, status_code=answer.status, headers={**answer.headers, **turn.headers}
        )
    return Response(answer.content, status_code=answer.status, headers={**answer.headers, **turn.headers})


async def prepare_turn(
    parts: Pipeline,
    surface: Surface,
    body: dict[str, Any],
    request_scope: RequestScope,
    transport: Transport,
) -> Turn:
    """Recall (timed, counted, fail-open), placement and the capture plan, with their headers."""
    forwarded, headers = body, {RECALLED: "0", CAPTURE_RESULT: CAPTURE_OFF}
    if not surface.is_turn(body):
        return Turn(forwarded, None, headers)
    if request_scope.memory_on and request_scope.recall:
        with parts.metrics.time_recall():
            text, count, error = await parts.recaller.memory_block(
                surface.query(body), str(body.get("model", "")), request_scope
            )
            if count:
                started = time.perf_counter()
                forwarded = surface.place(body, text, parts.settings.recall.placement, transport)
                parts.metrics.observe_recall_stage("placement", time.perf_counter() - started)
        parts.metrics.observe_recalled(count)
        headers[RECALLED] = str(count)
        if error is not None:
            parts.metrics.recall_failed()
            headers[RECALL_ERROR] = error
    # Planned from the caller's own body: the injected memory block is never captured.
    plan = parts.capture.plan(request_scope, body, surface.inputs(body))
    headers[CAPTURE_RESULT] = plan.job_id if plan else CAPTURE_OFF
    return Turn(forwarded, plan, headers)


async def commit_whole(parts: Pipeline, surface: Surface, turn: Turn, answer: Whole) -> None:
    """Capture a complete answer before it is returned; a failure only changes the header."""
    if turn.plan is None:
        return
    if answer.answer is None:
        parts.capture.not_captured(turn.plan, "the provider's answer is not JSON")
        turn.headers[CAPTURE_RESULT] = CAPTURE_OFF
        return
    turn.headers[CAPTURE_RESULT] = await parts.capture.commit(turn.plan, surface.reply_of(answer.answer))


Handler = Callable[[Request], Awaitable[Response]]
