"""Capture while another process holds the SQLite write lock (``serve --workers N``,
``memproxy worker``, an import on the same file) for longer than ``busy_timeout``.

A streamed answer's headers carry its job id before the turn is written, so a capture that
gave up on the lock after ``busy_timeout`` (5 s) left an answered turn with a job id that
never existed: the client saw a normal stream, the outbox had nothing (issue 24 finding 7).
Now the write is tried again until the lock is released, and the stream ends after it.

Real HTTP → memproxy (uvicorn) → scripted upstream; the lock is a second SQLite connection
on the proxy's file, as another process's would be.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from memproxy.storage.database import BUSY_TIMEOUT_MS
from memproxy.testing.scripted_upstream import ScriptedUpstream
from tests.support.memory_flow import DB_NAME, TOKEN, captured, unique
from tests.support.proxy import Proxy, proxy_settings, start_proxy

# Held this much beyond the busy timeout, so a capture that gives up at the timeout does.
BEYOND_BUSY_S = 1.0


@pytest.fixture
def proxy(upstream: tuple[ScriptedUpstream, str], tmp_path: Path) -> Iterator[Proxy]:
    # No extraction worker: its claims would queue behind the test's lock too.
    settings = proxy_settings(upstream[1], tmp_path, extraction={"worker_enabled": False})
    server, handle = start_proxy(settings)
    try:
        yield handle
    finally:
        server.stop()


class StreamReader(threading.Thread):
    """Reads one streamed chat turn, noting when the finishing chunk and the end arrived."""

    def __init__(self, url: str, user: str, text: str) -> None:
        super().__init__(daemon=True)
        self.url, self.user, self.text = url, user, text
        self.lines: list[str] = []
        self.job_id = ""
        self.finished = threading.Event()  # the chunk with a finish_reason arrived
        self.ended = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        body = {"model": "gpt-4o-mini", "stream": True, "messages": [{"role": "user", "content": self.text}]}
        headers = {"Authorization": f"Bearer {TOKEN}", "X-Memproxy-User-Id": self.user}
        try:
            with (
                httpx.Client(base_url=self.url, timeout=60) as http,
                http.stream("POST", "/v1/chat/completions", json=body, headers=headers) as response,
            ):
                self.job_id = response.headers.get("x-memproxy-capture", "")
                for line in response.iter_lines():
                    if not line:
                        continue
                    self.lines.append(line)
                    if line.startswith("data: {") and any(
                        c.get("finish_reason") for c in json.loads(line[6:]).get("choices", [])
                    ):
                        self.finished.set()
        except BaseException as exc:  # reported by the test
            self.error = exc
        finally:
            self.ended.set()


# Slow tier: it holds the lock for BUSY_TIMEOUT_MS + 1 s (6 s) by design.
@pytest.mark.slow
def test_a_streamed_turn_is_captured_after_a_lock_held_past_busy_timeout(proxy: Proxy) -> None:
    locker = sqlite3.connect(proxy.data_dir / DB_NAME, isolation_level=None, timeout=30)
    try:
        locker.execute("BEGIN IMMEDIATE")  # another process's write transaction
        text = unique("I keep bees in Porto")
        reader = StreamReader(proxy.url, unique("u"), text)
        reader.start()
        # The answer is out (its last chunk relayed); its capture now waits on the lock.
        assert reader.finished.wait(30), reader.lines
        assert reader.job_id.startswith("job_")
        # Returns early only if the stream ends while the lock is held: the capture gave up.
        ended_while_locked = reader.ended.wait(BUSY_TIMEOUT_MS / 1000 + BEYOND_BUSY_S)
        assert not ended_while_locked, f"the stream ended while the database was locked: {reader.lines}"
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    assert reader.ended.wait(30)
    assert reader.error is None, reader.error
    assert reader.lines[-1] == "data: [DONE]"
    assert captured(proxy, reader.job_id) == [
        {"role": "user", "content": text},
        {"role": "assistant", "content": f"You said: {text}"},
    ]
