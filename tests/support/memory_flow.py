"""Helpers for the capture/worker tests: chat over real HTTP, read the outbox, wait for jobs."""

from __future__ import annotations

import json
import logging
import sqlite3
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import psycopg

from memproxy.storage.engine import to_pyformat
from tests.support.proxy import Proxy, http_client

T = TypeVar("T")
TOKEN = "sk-test-user-a"
DB_NAME = "memproxy.sqlite3"


@dataclass
class Turn:
    status: int
    headers: httpx.Headers
    text: str | None  # the assistant's text (streams reassembled)
    body: dict[str, Any] | None

    @property
    def job_id(self) -> str:
        return str(self.headers.get("x-memproxy-capture", ""))


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def chat(
    base_url: str,
    messages: list[Any],
    *,
    user: str | None,
    session: str | None = None,
    stream: bool = False,
    model: str = "gpt-4o-mini",
    token: str = TOKEN,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> Turn:
    sent = {"Authorization": f"Bearer {token}", **(headers or {})}
    if user is not None:
        sent["X-Memproxy-User-Id"] = user
    if session is not None:
        sent["X-Memproxy-Session-Id"] = session
    body = {"model": model, "messages": messages, "stream": stream, **extra}
    with http_client(base_url=base_url, timeout=30) as http:
        response = http.post("/v1/chat/completions", json=body, headers=sent)
    if not stream or response.status_code != 200:
        data = response.json()
        text = data["choices"][0]["message"]["content"] if response.status_code == 200 else None
        return Turn(response.status_code, response.headers, text, data)
    pieces: list[str] = []
    for line in response.text.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices", []):
                pieces.append(choice.get("delta", {}).get("content") or "")
    return Turn(response.status_code, response.headers, "".join(pieces), None)


def say(proxy: Proxy, text: str, *, user: str | None, session: str | None = None, **kw: Any) -> Turn:
    return chat(proxy.url, [{"role": "user", "content": text}], user=user, session=session, **kw)


def query(where: Proxy | Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Read a proxy's database directly (its SQLite file read-only, or its Postgres schema) to see
    what was captured. ``sql`` uses SQLite's ``?`` placeholders on both engines."""
    url = where.settings.storage.url if isinstance(where, Proxy) else None
    if url:
        with psycopg.connect(url, autocommit=True) as pg:
            return [tuple(r) for r in pg.execute(to_pyformat(sql), params).fetchall()]
    data_dir = where.data_dir if isinstance(where, Proxy) else where
    conn = sqlite3.connect(f"file:{data_dir / DB_NAME}?mode=ro", uri=True, timeout=5)
    try:
        return [tuple(r) for r in conn.execute(sql, params).fetchall()]
    finally:
        conn.close()


def captured(where: Proxy | Path, job_id: str) -> list[dict[str, Any]]:
    rows = query(where, "SELECT content FROM messages WHERE job_id = ? ORDER BY num", (job_id,))
    return [json.loads(r[0]) for r in rows]


def wait_until(predicate: Callable[[], T | None], timeout: float = 15.0, interval: float = 0.02) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


def request_ended(records: list[logging.LogRecord], request_id: str, timeout: float = 15.0) -> str:
    """Wait for the access-log line of ``request_id`` (an ``X-Request-Id`` the test sent) and
    return it. The line is written when the request has ended (answer sent, failed, or its
    client gone), after whatever the request itself stores: the event a negative check of
    what a request left behind waits on. ``records``: ``caplog.records``, with
    ``memproxy.access`` at INFO."""

    def logged() -> str | None:
        for record in list(records):
            if record.name == "memproxy.access" and f"request_id={request_id} " in record.getMessage() + " ":
                return record.getMessage()
        return None

    return wait_until(logged, timeout, interval=0.01)


def job(base_url: str, job_id: str, token: str = TOKEN) -> dict[str, Any] | None:
    with http_client(base_url=base_url, timeout=10, headers={"Authorization": f"Bearer {token}"}) as http:
        response = http.get(f"/v1/jobs/{job_id}")
    return response.json() if response.status_code == 200 else None


def wait_job(base_url: str, job_id: str, status: str = "done", timeout: float = 15.0,
             token: str = TOKEN) -> dict[str, Any]:  # fmt: skip
    def reached() -> dict[str, Any] | None:
        found = job(base_url, job_id, token)
        return found if found and found["status"] == status else None

    return wait_until(reached, timeout)


def memories(base_url: str, user: str, token: str = TOKEN) -> list[dict[str, Any]]:
    with http_client(base_url=base_url, timeout=10, headers={"Authorization": f"Bearer {token}"}) as http:
        response = http.get("/v1/memories", params={"user_id": user, "limit": 1000})
    assert response.status_code == 200, response.text
    data: list[dict[str, Any]] = response.json()["data"]
    return data


def search(base_url: str, user: str, text: str, token: str = TOKEN) -> list[dict[str, Any]]:
    with http_client(base_url=base_url, timeout=10, headers={"Authorization": f"Bearer {token}"}) as http:
        response = http.post("/v1/memories/search", json={"query": text, "user_id": user})
    assert response.status_code == 200, response.text
    data: list[dict[str, Any]] = response.json()["data"]
    return data
