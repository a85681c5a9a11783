"""Operations routes: liveness, readiness and Prometheus metrics (no credentials)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.responses import JSONResponse, Response

from memproxy import __version__
from memproxy.metrics import Metrics

router = APIRouter()


@router.get("/healthz")
async def healthz() -> Response:
    return JSONResponse({"status": "ok", "version": __version__})


@router.get("/readyz")
async def readyz(request: Request) -> Response:
    services = getattr(request.app.state, "services", None)
    if services is None or not services.ready:
        return JSONResponse({"status": "starting"}, status_code=503)
    problems = services.health_problems() if hasattr(services, "health_problems") else []
    # Missing credentials for memory's own model calls degrade memory, not the proxy: the
    # instance stays ready (200) so a load balancer keeps it, and says so in ``memory``.
    memory = services.memory_status()
    if problems:
        return JSONResponse({"status": "degraded", "problems": problems, "memory": memory}, status_code=503)
    # Still serving (chat answers, recall fails open, turns are spooled): 200, but say so.
    notes = await services.degradations() if hasattr(services, "degradations") else []
    if notes:
        return JSONResponse({"status": "degraded", "degraded": notes, "memory": memory})
    return JSONResponse({"status": "ready", "memory": memory})


@router.get("/metrics")
async def metrics_endpoint(request: Request) -> Response:
    metrics: Metrics | None = getattr(request.app.state, "metrics", None)
    if metrics is None:
        return Response(b"", media_type=CONTENT_TYPE_LATEST)
    services = getattr(request.app.state, "services", None)
    if services is not None:
        await services.refresh_metrics()
    return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)
