"""Operations routes: liveness, readiness and Prometheus metrics (no credentials)."""

from __future__ import annotations

from fastapi import APIRouter
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.responses import JSONResponse, Response

from memproxy import __version__
from memproxy.api.deps import ReadinessDep, ScrapeDep

router = APIRouter()


@router.get("/healthz")
async def healthz() -> Response:
    return JSONResponse({"status": "ok", "version": __version__})


@router.get("/readyz")
async def readyz(app: ReadinessDep) -> Response:
    if app is None or not app.ready:
        return JSONResponse({"status": "starting"}, status_code=503)
    problems = app.health_problems()
    # Missing credentials for memory's own model calls degrade memory, not the proxy: the
    # instance stays ready (200) so a load balancer keeps it, and says so in ``memory``.
    memory = app.memory_status()
    if problems:
        return JSONResponse({"status": "degraded", "problems": problems, "memory": memory}, status_code=503)
    # Still serving (chat answers, recall fails open, turns are spooled): 200, but say so.
    notes = await app.degradations()
    if notes:
        return JSONResponse({"status": "degraded", "degraded": notes, "memory": memory})
    return JSONResponse({"status": "ready", "memory": memory})


@router.get("/metrics")
async def metrics_endpoint(metrics: ScrapeDep) -> Response:
    if metrics is None:
        return Response(b"", media_type=CONTENT_TYPE_LATEST)
    return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)
