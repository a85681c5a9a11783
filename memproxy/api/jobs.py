"""``GET /v1/jobs``, ``GET /v1/jobs/{id}``, ``GET /v1/jobs/{id}/messages`` and
``POST /v1/jobs/{id}/retry``: the caller's extraction jobs.

Invariants:
- Tenant-bound like every management route: the tenant is the credential's, and another
  tenant's job id is answered exactly like a missing one (404).
- ``GET /v1/jobs`` pages by an opaque cursor over ``(created_at, id)``, the listing order,
  so a page boundary never skips or repeats a job even when jobs share a timestamp.
- Retry re-queues only a dead job. A done job's turn is already extracted, so retrying it
  is a 409 (a second extraction would apply the same facts twice); a pending or running
  job is already queued, so retrying it is an idempotent no-op answered with the job.
"""

from __future__ import annotations

import base64
import json

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from memproxy.api.deps import ClockDep, CredentialDep, DatabaseDep, WorkerDep, allow_query
from memproxy.errors import ApiError, not_found
from memproxy.outbox import queue as outbox
from memproxy.scope import validate_id
from memproxy.storage.engine import Connection

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


def encode_cursor(job: outbox.Job) -> str:
    raw = json.dumps([job.created_at, job.id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str]:
    try:
        created_at, job_id = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if not isinstance(created_at, int | float) or not isinstance(job_id, str):
            raise ValueError(cursor)
    except (ValueError, TypeError):
        raise ApiError(400, "invalid cursor", param="cursor", code="invalid_cursor") from None
    return float(created_at), job_id


@router.get(
    "/v1/jobs", dependencies=[allow_query("status", "limit", "cursor", "user_id", "agent_id", "order")]
)
async def list_jobs(request: Request, credential: CredentialDep, db: DatabaseDep) -> Response:
    """``user_id`` / ``agent_id`` select exactly (absent: any), as the console's scope page needs;
    ``order=desc`` lists newest first (a cursor continues in the order it was made in)."""
    order = request.query_params.get("order") or "asc"
    if order not in ("asc", "desc"):
        raise ApiError(400, "order must be asc or desc", param="order", code="invalid_value")
    status = request.query_params.get("status") or None
    if status is not None and status not in outbox.STATUSES:
        raise ApiError(400, f"status must be one of {', '.join(outbox.STATUSES)}", param="status",
                       code="invalid_value")  # fmt: skip
    limit = _limit(request.query_params.get("limit"))
    cursor = request.query_params.get("cursor")
    after = decode_cursor(cursor) if cursor else None
    query = request.query_params
    user_id, agent_id = (validate_id(query[k], k) if k in query else None for k in ("user_id", "agent_id"))
    jobs = await db.run(
        lambda c: outbox.list_jobs(
            c, credential.tenant, status, limit + 1, after, user_id, agent_id, newest_first=order == "desc"
        )
    )
    page = jobs[:limit]
    next_cursor = encode_cursor(page[-1]) if len(jobs) > limit else None
    return JSONResponse(
        {"object": "list", "data": [job.to_api() for job in page], "next_cursor": next_cursor}
    )


@router.get("/v1/jobs/{job_id}", dependencies=[allow_query()])
async def get_job(job_id: str, credential: CredentialDep, db: DatabaseDep) -> Response:
    job = await db.run(lambda c: outbox.get_job(c, credential.tenant, job_id))
    if job is None:
        raise not_found("job")
    return JSONResponse(job.to_api())


@router.get("/v1/jobs/{job_id}/messages", dependencies=[allow_query()])
async def job_messages(job_id: str, credential: CredentialDep, db: DatabaseDep) -> Response:
    """The turn the job captured (kept after extraction; erased when its scope is forgotten)."""

    def read(conn: Connection) -> list[dict[str, object]] | None:
        if outbox.get_job(conn, credential.tenant, job_id) is None:
            return None
        return outbox.captured_messages(conn, credential.tenant, job_id)

    messages = await db.run(read)
    if messages is None:
        raise not_found("job")
    return JSONResponse({"object": "list", "job_id": job_id, "data": messages})


@router.post("/v1/jobs/{job_id}/retry", dependencies=[allow_query()])
async def retry_job(
    job_id: str, credential: CredentialDep, db: DatabaseDep, clock: ClockDep, worker: WorkerDep
) -> Response:
    """Re-queue a dead job (fresh attempt budget); 409 for a done job (see module doc)."""
    now = clock()

    def write(conn: Connection) -> outbox.Job | None:
        with conn:
            return outbox.retry(conn, credential.tenant, job_id, now)

    job = await db.run(write)
    if job is None:
        raise not_found("job")
    if job.status == "done":
        raise ApiError(
            409,
            f"Job {job_id} is done: its turn has already been extracted, so there is nothing to retry. "
            "Only dead jobs can be retried.",
            param="job_id",
            code="job_not_retryable",
        )
    if job.status == "pending" and worker is not None:
        worker.notify()
    return JSONResponse(job.to_api())
