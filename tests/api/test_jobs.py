"""``/v1/jobs``: cursor paging, and what retrying a job that is not dead answers."""

from __future__ import annotations

import uuid

import httpx
import pytest

from tests.support.memory_flow import wait_job
from tests.support.proxy import Proxy


@pytest.fixture
def proxy(engine_proxy: Proxy) -> Proxy:
    """Every test of this suite runs on both engines (SQLite and Postgres)."""
    return engine_proxy


def _queue_turn(http: httpx.Client, text: str) -> str:
    response = http.post(
        "/v1/memories", json={"user_id": "pager", "messages": [{"role": "user", "content": text}]}
    )
    assert response.status_code == 202, response.text
    job_id: str = response.json()["job_id"]
    return job_id


def test_jobs_are_paged_with_a_cursor_without_gaps_or_repeats(proxy: Proxy) -> None:
    token = f"sk-jobs-{uuid.uuid4().hex[:8]}"
    with proxy.http(token) as http:
        queued = [_queue_turn(http, f"I like hobby {i}") for i in range(5)]
        seen: list[str] = []
        cursor: str | None = None
        pages = 0
        while True:
            params = {"limit": "2", **({"cursor": cursor} if cursor else {})}
            body = http.get("/v1/jobs", params=params).json()
            assert len(body["data"]) <= 2
            seen += [job["id"] for job in body["data"]]
            pages += 1
            cursor = body["next_cursor"]
            if cursor is None:
                break
        assert seen == queued and pages == 3
        bad = http.get("/v1/jobs", params={"cursor": "not-a-cursor"})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "cursor"
        typo = http.get("/v1/jobs", params={"state": "dead"})  # unknown parameter: 400, not every job
        assert typo.status_code == 400 and typo.json()["error"]["param"] == "state"


def test_retrying_a_done_job_is_a_conflict_not_a_silent_200(proxy: Proxy) -> None:
    token = f"sk-jobs-{uuid.uuid4().hex[:8]}"
    with proxy.http(token) as http:
        job_id = _queue_turn(http, "I live in Porto")
        wait_job(proxy.url, job_id, token=token)
        response = http.post(f"/v1/jobs/{job_id}/retry")
        assert response.status_code == 409, response.text
        error = response.json()["error"]
        assert error["code"] == "job_not_retryable" and "done" in error["message"]
        assert http.get(f"/v1/jobs/{job_id}").json()["status"] == "done"  # left as it was
