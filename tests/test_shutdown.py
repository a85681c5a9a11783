"""SIGTERM: in-flight streams finish, leases are released, snapshots written, exit 0;
a restart loads the snapshots and re-does nothing.

``memproxy serve`` runs as a real subprocess (signals, exit codes); the scripted upstream
is the session's.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest

from memproxy.testing.background_server import free_port
from memproxy.testing.scripted_upstream import ScriptedUpstream
from tests.support.memory_flow import wait_until
from tests.support.serve_process import ServeProcess, write_config

pytestmark = pytest.mark.slow  # subprocesses: see README "Tests"

TOKEN = "sk-shutdown-test"


def chat(url: str, user: str, text: str, **extra: object) -> httpx.Response:
    return httpx.post(
        url + "/v1/chat/completions",
        timeout=30,
        headers={"Authorization": f"Bearer {TOKEN}", "X-Memproxy-User-Id": user},
        json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}], **extra},
    )


def memories(url: str, user: str) -> list[dict[str, object]]:
    response = httpx.get(
        url + "/v1/memories",
        params={"user_id": user},
        timeout=10,
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert response.status_code == 200, response.text
    data: list[dict[str, object]] = response.json()["data"]
    return data


def job_rows(data_dir: Path) -> dict[str, tuple[str, str | None]]:
    with sqlite3.connect(data_dir / "memproxy.sqlite3") as conn:
        return {row[0]: (row[1], row[2]) for row in conn.execute("SELECT id, status, lease_owner FROM jobs")}


def extractions_of(fake: ScriptedUpstream, text: str) -> int:
    """Extraction calls whose *new* messages (not context) include ``text``."""
    count = 0
    for record in fake.chat_requests(extraction=True):
        for message in record.body["messages"]:
            if message["role"] != "user":
                continue
            payload = json.loads(message["content"])
            count += any(m.get("content") == text for m in payload.get("new_messages", []))
    return count


class StreamReader(threading.Thread):
    """Reads a slow streamed answer in the background, recording every SSE line."""

    def __init__(self, url: str, user: str, text: str) -> None:
        super().__init__(daemon=True)
        self.url, self.user, self.text = url, user, text
        self.lines: list[str] = []
        self.headers: dict[str, str] = {}
        self.first_chunk = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        body = {"model": "slow", "stream": True, "messages": [{"role": "user", "content": self.text}]}
        headers = {"Authorization": f"Bearer {TOKEN}", "X-Memproxy-User-Id": self.user}
        try:
            with httpx.stream(
                "POST", self.url + "/v1/chat/completions", json=body, headers=headers, timeout=30
            ) as response:
                self.headers = dict(response.headers)
                for line in response.iter_lines():
                    if line:
                        self.lines.append(line)
                        self.first_chunk.set()
        except BaseException as exc:
            self.error = exc
        finally:
            self.first_chunk.set()


def test_sigterm_finishes_streams_and_restart_redoes_nothing(
    upstream: tuple[ScriptedUpstream, str], tmp_path: Path
) -> None:
    fake, upstream_url = upstream
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    config = write_config(tmp_path / "config.yaml", {
        "server": {"port": port, "shutdown_grace_s": 15},
        "storage": {"data_dir": str(tmp_path / "data")},
        "upstream": {"api_base": upstream_url, "timeout_s": 10},
        "extraction": {"model": "extractor", "poll_interval_s": 0.05, "backoff_base_s": 0.05},
    })  # fmt: skip
    data_dir = tmp_path / "data"
    marker = "shutdown" + uuid.uuid4().hex[:10]
    user = "user-" + marker

    with ServeProcess("serve", config, tmp_path / "first.log") as server:
        server.wait_ready(url)
        # A memory from an earlier turn, fully extracted before the shutdown.
        first = chat(url, user, f"Remember that the codeword is {marker}")
        assert first.status_code == 200
        wait_until(lambda: any(marker in str(m["text"]) for m in memories(url, user)), timeout=20)
        wait_until(lambda: job_rows(data_dir)[first.headers["x-memproxy-capture"]][0] == "done", timeout=20)

        # 40 words at 50 ms per chunk: a stream of about two seconds, SIGTERM in its middle.
        reader = StreamReader(url, user, " ".join(f"word{i}" for i in range(40)))
        reader.start()
        assert reader.first_chunk.wait(10)
        server.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        with pytest.raises(httpx.ConnectError):  # stopped accepting new connections
            httpx.get(url + "/healthz", timeout=2)
        code = server.wait(30)
    reader.join(10)

    assert code == 0, server.log_text()
    assert reader.error is None, reader.error
    assert reader.lines[-1] == "data: [DONE]", reader.lines[-3:]
    words = "".join(
        json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
        for line in reader.lines[:-1]
        if json.loads(line[6:]).get("choices")
    )
    assert "word39" in words
    streamed_job = reader.headers["x-memproxy-capture"]
    jobs = job_rows(data_dir)
    assert streamed_job in jobs, "the turn that finished during shutdown was captured"
    assert all(
        status != "running" and owner is None for status, owner in jobs.values() if status != "done"
    ), jobs
    snapshots = list((data_dir / "index").glob("*.faiss"))
    assert snapshots, "index snapshots written on shutdown"
    mtimes = {p: p.stat().st_mtime_ns for p in snapshots}
    first_text = f"Remember that the codeword is {marker}"
    extraction_calls = extractions_of(fake, first_text)

    with ServeProcess("serve", config, tmp_path / "second.log") as server:
        server.wait_ready(url)
        wait_until(lambda: job_rows(data_dir)[streamed_job][0] == "done", timeout=20)
        recalled = chat(url, user, f"What is the codeword {marker}?")
        assert marker in recalled.json()["choices"][0]["message"]["content"]
        held = [m for m in memories(url, user) if marker in str(m["text"])]
        assert len(held) == 1, held
        assert server.stop() == 0
    second_log = server.log_text()
    assert "rebuilt index" not in second_log, second_log
    # The first turn's job was done before the restart: it was not extracted again.
    assert extractions_of(fake, first_text) == extraction_calls == 1
    assert all(p.exists() for p in mtimes)
