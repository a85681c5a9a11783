"""``GET /v1/jobs`` and ``POST /v1/jobs/{id}/retry``: the caller's extraction jobs.

Invariant: tenant-bound like every management route — the tenant is the credential's,
and another tenant's job id is answered exactly like a missing one (404).
"""

from __future__ import annotations

import sqlite3

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from memproxy.api.deps import CredentialDep, ServicesDep
from memproxy.errors import ApiError, not_found
from memproxy.outbox import queue as outbox

router = APIRouter()

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000


def _limit(raw: str | None) -> int:
    if raw is None:
        return DEFAULT_LIMIT
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_LIMIT:
        raise ApiError(400, f"limit must be an integer between 1 and {MAX_LIMIT}", param="limit")
    return value


@router.get("/v1/jobs")
async def list_jobs(request: Request, credential: CredentialDep, services: ServicesDep) -> Response:
    status = request.query_params.get("status") or None
    if status is not None and status not in outbox.STATUSES:
        raise ApiError(400, f"status must be one of {', '.join(outbox.STATUSES)}", param="status",
                       code="invalid_value")  # fmt: skip
    limit = _limit(request.query_params.get("limit"))
    jobs = await services.db.run(lambda c: outbox.list_jobs(c, credential.tenant, status, limit))
    return JSONResponse({"object": "list", "data": [job.to_api() for job in jobs]})


@router.get("/v1/jobs/{job_id}")
async def get_job(job_id: str, credential: CredentialDep, services: ServicesDep) -> Response:
    job = await services.db.run(lambda c: outbox.get_job(c, credential.tenant, job_id))
    if job is None:
        raise not_found("job")
    return JSONResponse(job.to_api())


@router.post("/v1/jobs/{job_id}/retry")
async def retry_job(job_id: str, credential: CredentialDep, services: ServicesDep) -> Response:
    """Re-queue a dead job (fresh attempt budget). Other states are returned unchanged."""
    now = services.store.clock()

    def write(conn: sqlite3.Connection) -> outbox.Job | None:
        with conn:
            return outbox.retry(conn, credential.tenant, job_id, now)

    job = await services.db.run(write)
    if job is None:
        raise not_found("job")
    if job.status == "pending" and services.worker is not None:
        services.worker.notify()
    return JSONResponse(job.to_api())
