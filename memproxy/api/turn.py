"""What every memory-aware API surface does around its provider call, whatever its shape:
scope → recall (timed, counted, fail-open) → capture plan → response headers.

A surface supplies its query text, the way it places the memory block and its new input;
the headers (``X-Memproxy-Recalled``, ``X-Memproxy-Recall-Error``, ``X-Memproxy-Capture``)
and the metrics are the same as chat's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from memproxy.outbox.capture import OFF as CAPTURE_OFF
from memproxy.outbox.capture import PlannedCapture
from memproxy.proxy.placement import Placement
from memproxy.scope import RequestScope
from memproxy.services import Services
from memproxy.wire.headers import CAPTURE_RESULT as CAPTURE_RESPONSE_HEADER
from memproxy.wire.headers import RECALL_ERROR as RECALL_ERROR_HEADER
from memproxy.wire.headers import RECALLED as RECALLED_HEADER

Place = Callable[[dict[str, Any], str, Placement], dict[str, Any]]


@dataclass
class PreparedTurn:
    """The body to forward, the capture plan and the headers of the answer."""

    forwarded: dict[str, Any]
    plan: PlannedCapture | None
    headers: dict[str, str] = field(default_factory=dict)


async def prepare_turn(
    services: Services,
    body: dict[str, Any],
    request_scope: RequestScope,
    *,
    query: str,
    place: Place,
    inputs: list[dict[str, Any]],
) -> PreparedTurn:
    forwarded, headers = body, {RECALLED_HEADER: "0"}
    if request_scope.memory_on and request_scope.recall:
        with services.metrics.time_recall():
            text, count, error = await services.recaller.memory_block(
                query, str(body.get("model", "")), request_scope
            )
        services.metrics.observe_recalled(count)
        headers[RECALLED_HEADER] = str(count)
        if error is not None:
            services.metrics.recall_failed()
            headers[RECALL_ERROR_HEADER] = error
        if count:
            forwarded = place(body, text, services.settings.recall.placement)
    # Planned from the caller's own body: the injected memory block is never captured.
    plan = services.capture.plan(request_scope, body, inputs)
    headers[CAPTURE_RESPONSE_HEADER] = plan.job_id if plan else CAPTURE_OFF
    return PreparedTurn(forwarded, plan, headers)


async def commit_reply(
    services: Services, turn: PreparedTurn, reply: dict[str, Any] | None
) -> dict[str, str]:
    """Capture a non-streamed answer before it is returned; a failure only changes the header."""
    if turn.plan is not None:
        turn.headers[CAPTURE_RESPONSE_HEADER] = await services.capture.commit(turn.plan, reply)
    return turn.headers


STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
