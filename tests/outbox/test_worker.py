"""The extraction worker end to end: captured turns become memories that later chats recall.

The scripted upstream answers extraction calls with its rule-based extractor (``I live in
Paris`` → ADD, ``I moved to Berlin`` → UPDATE …) unless a test installs its own. The crash
and separate-process tests run ``memproxy serve`` / ``memproxy worker`` as subprocesses.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memproxy.testing.background_server import free_port
from memproxy.testing.scripted_extractor import rule_extractor
from memproxy.testing.scripted_upstream import MEMORY_MARKER, ScriptedUpstream
from tests.support.memory_flow import job, memories, query, say, search, unique, wait_job, wait_until
from tests.support.proxy import Proxy, proxy_settings, start_proxy
from tests.support.serve_process import ServeProcess, write_config


@pytest.fixture
def proxy(engine_proxy: Proxy) -> Proxy:
    """Every test of this suite runs on both engines (SQLite and Postgres)."""
    return engine_proxy


def extraction_calls(fake: ScriptedUpstream, needle: str, model: str | None = None) -> list[dict[str, Any]]:
    return [
        r.body for r in fake.chat_requests(extraction=True)
        if needle in json.dumps(r.body) and (model is None or r.body.get("model") == model)
    ]  # fmt: skip


@pytest.fixture
def scripted(fake: ScriptedUpstream) -> Iterator[ScriptedUpstream]:
    """The fake upstream, with the default extractor restored after the test."""
    yield fake
    fake.extractor = None


def test_fact_from_one_conversation_is_recalled_in_the_next(proxy: Proxy, fake: ScriptedUpstream) -> None:
    user = unique("u")
    turn = say(proxy, "Hi there. I live in Paris.", user=user, session="monday")
    done = wait_job(proxy.url, turn.job_id)
    assert done["usage"]["prompt_tokens"] > 0  # tokens recorded per job
    assert [m["text"] for m in memories(proxy.url, user)] == ["User lives in Paris"]
    later = say(proxy, "Where do I live?", user=user, session="friday")
    forwarded = fake.find_chat("Where do I live?").body["messages"]
    assert any(
        MEMORY_MARKER in str(m["content"]) and "User lives in Paris" in str(m["content"]) for m in forwarded
    )
    assert "I remember: " in (later.text or "") and "User lives in Paris" in (later.text or "")


def test_update_keeps_one_current_memory_with_both_in_history(proxy: Proxy) -> None:
    user = unique("u")
    wait_job(proxy.url, say(proxy, "I live in Paris", user=user).job_id)
    wait_job(proxy.url, say(proxy, "Big news: I moved to Berlin!", user=user).job_id)
    (current,) = memories(proxy.url, user)
    assert current["text"] == "User lives in Berlin" and current["source"] == "extracted"
    with proxy.http() as http:
        history = http.get(f"/v1/memories/{current['id']}/history").json()["data"]
    assert [(h["event"], h["old_text"], h["new_text"]) for h in history] == [
        ("ADD", None, "User lives in Paris"),
        ("UPDATE", "User lives in Paris", "User lives in Berlin"),
    ]
    assert all("Paris" not in hit["text"] for hit in search(proxy.url, user, "Paris"))


def test_delete_removes_the_memory_from_search_and_recall(proxy: Proxy, fake: ScriptedUpstream) -> None:
    user = unique("u")
    wait_job(proxy.url, say(proxy, "I love jazz", user=user).job_id)
    assert [h["text"] for h in search(proxy.url, user, "jazz")] == ["User likes jazz"]
    wait_job(proxy.url, say(proxy, "Actually I don't like jazz anymore", user=user).job_id)
    assert memories(proxy.url, user) == [] and search(proxy.url, user, "jazz") == []
    ask = unique("Any jazz tips")
    say(proxy, ask, user=user)
    assert "User likes jazz" not in json.dumps(fake.find_chat(ask).body)


def test_malformed_output_is_retried_then_dead_then_requeued(
    proxy: Proxy, scripted: ScriptedUpstream
) -> None:
    marker, state = unique("tea"), {"broken": True}

    def flaky(body: dict[str, Any]) -> str:
        if marker in json.dumps(body) and state["broken"]:
            return "Sure! The user likes tea."  # prose, not the JSON that was asked for
        return rule_extractor(body)

    scripted.extractor = flaky
    user = unique("u")
    turn = say(proxy, f"I like {marker}", user=user)
    dead = wait_job(proxy.url, turn.job_id, status="dead")
    max_attempts = proxy.settings.extraction.max_attempts
    assert dead["attempts"] == max_attempts and "not JSON" in dead["last_error"]
    assert len(extraction_calls(scripted, marker)) == max_attempts
    assert memories(proxy.url, user) == []  # never silently "no memories" either: it is dead, listed
    with proxy.http() as http:
        assert turn.job_id in [
            j["id"] for j in http.get("/v1/jobs", params={"status": "dead"}).json()["data"]
        ]
    with proxy.http("sk-test-user-b") as other:
        assert other.post(f"/v1/jobs/{turn.job_id}/retry").status_code == 404
        assert other.get(f"/v1/jobs/{turn.job_id}").status_code == 404
    state["broken"] = False
    with proxy.http() as http:
        retried = http.post(f"/v1/jobs/{turn.job_id}/retry")
    assert retried.status_code == 200 and retried.json()["status"] in ("pending", "running", "done")
    assert wait_job(proxy.url, turn.job_id)["attempts"] == 1
    assert [m["text"] for m in memories(proxy.url, user)] == [f"User likes {marker}"]


def test_burst_of_turns_in_one_scope_costs_one_extraction_call(
    proxy: Proxy, scripted: ScriptedUpstream
) -> None:
    """While a scope's batch is leased its new jobs wait, then go out together in one call."""
    user, blocker, release = unique("u"), unique("hold"), threading.Event()

    async def held(body: dict[str, Any]) -> str:
        if blocker in json.dumps(body):
            await asyncio.to_thread(release.wait, 30)  # off the fake's loop: other calls go on
        return rule_extractor(body)

    scripted.extractor = held
    first = say(proxy, f"Hello {blocker}", user=user)
    wait_until(lambda: extraction_calls(scripted, blocker))
    likes = [unique("hobby") for _ in range(5)]
    burst = [say(proxy, f"I like {like}", user=user).job_id for like in likes]
    assert all((job(proxy.url, job_id) or {}).get("status") == "pending" for job_id in burst)
    release.set()
    for job_id in [first.job_id, *burst]:
        wait_job(proxy.url, job_id)
    calls = [
        r.body
        for r in scripted.chat_requests(extraction=True)
        if any(like in json.dumps(r.body) for like in likes)
    ]
    assert len(calls) == 1 and all(like in json.dumps(calls[0]) for like in likes)
    assert sorted(m["text"] for m in memories(proxy.url, user)) == sorted(
        f"User likes {like}" for like in likes
    )


def test_forget_while_a_batch_is_extracting_leaves_nothing_behind(
    proxy: Proxy, scripted: ScriptedUpstream
) -> None:
    """The forget erases the leased job; the worker's commit then finds its lease gone and writes nothing."""
    user, place, release = unique("u"), unique("town"), threading.Event()

    async def held(body: dict[str, Any]) -> str:
        if place in json.dumps(body):
            await asyncio.to_thread(release.wait, 30)
        return rule_extractor(body)

    scripted.extractor = held
    turn = say(proxy, f"I live in {place}", user=user)
    wait_until(lambda: extraction_calls(scripted, place))
    with proxy.http() as http:
        forgotten = http.delete("/v1/memories", params={"user_id": user})
    assert forgotten.status_code == 200 and forgotten.json()["deleted"]["jobs"] == 1
    release.set()
    # The in-serve worker runs one batch at a time: once a later job is done, the held one is over.
    wait_job(proxy.url, say(proxy, f"I like {unique('tea')}", user=unique("u")).job_id)
    assert memories(proxy.url, user) == []
    assert job(proxy.url, turn.job_id) is None
    assert query(proxy, "SELECT count(*) FROM memories WHERE text LIKE ?", (f"%{place}%",)) == [(0,)]


# --- separate processes ---------------------------------------------------------------------


@pytest.mark.slow
def test_sigkill_while_leased_then_restart_completes_exactly_once(
    upstream: tuple[ScriptedUpstream, str], tmp_path: Path
) -> None:
    fake, upstream_url = upstream
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    common: dict[str, Any] = {"lease_s": 1.0, "timeout_s": 60}
    hanging = proxy_settings(upstream_url, tmp_path / "data", server={"port": port},
                             upstream={"timeout_s": 60}, extraction={**common, "model": "hang"})  # fmt: skip
    name = "Kim" + unique("x").split("-")[1]
    log = tmp_path / "serve.log"
    with ServeProcess("serve", write_config(tmp_path / "hang.yaml", hanging), log) as server:
        server.wait_ready(url)
        turn = say(Proxy(url, hanging, hanging.storage.data_dir), f"My name is {name}", user="kim")
        wait_until(lambda: extraction_calls(fake, name, model="hang"))
        assert query(hanging.storage.data_dir, "SELECT status FROM jobs WHERE id = ?", (turn.job_id,)) == [
            ("running",)
        ]
        server.stop(signal.SIGKILL)  # the crash under test, while the job is leased
    healthy = hanging.model_copy(deep=True)
    healthy.extraction.model = "extractor"
    with ServeProcess("serve", write_config(tmp_path / "ok.yaml", healthy), log) as server:
        server.wait_ready(url)
        done = wait_job(url, turn.job_id, timeout=30)
        assert done["attempts"] == 2  # the killed attempt counted, then one that finished
        assert [m["text"] for m in memories(url, "kim")] == [f"User's name is {name}"]
        assert len(extraction_calls(fake, name, model="extractor")) == 1
        assert query(healthy.storage.data_dir, "SELECT count(*) FROM history WHERE new_text LIKE ?",
                     (f"%{name}%",)) == [(1,)]  # fmt: skip
        assert server.stop() == 0


@pytest.mark.slow
def test_separate_worker_process_drains_jobs_while_serve_runs_without_one(
    upstream: tuple[ScriptedUpstream, str], tmp_path: Path
) -> None:
    settings = proxy_settings(upstream[1], tmp_path / "data", extraction={"worker_enabled": False})
    server, proxy = start_proxy(settings)
    try:
        user = unique("u")
        facts = ["I live in Oslo", "I work at Acme", "I love skiing"]
        jobs = [say(proxy, fact, user=user).job_id for fact in facts]
        assert all((job(proxy.url, j) or {}).get("status") == "pending" for j in jobs)
        config = write_config(tmp_path / "worker.yaml", settings)
        with ServeProcess("worker", config, tmp_path / "worker.log") as worker:
            for job_id in jobs:
                wait_job(proxy.url, job_id, timeout=60)
            assert worker.stop() == 0, worker.log_text()
        expected = {"User lives in Oslo", "User works at Acme", "User likes skiing"}
        assert {m["text"] for m in memories(proxy.url, user)} == expected
        # serve's index catches up from the change log the other process wrote.
        assert [h["text"] for h in search(proxy.url, user, "Oslo")][:1] == ["User lives in Oslo"]
    finally:
        server.stop()


def test_stopping_the_worker_releases_its_leases(
    upstream: tuple[ScriptedUpstream, str], tmp_path: Path
) -> None:
    """Shutdown mid-extraction: the job goes back to pending without spending an attempt."""
    from memproxy.config import ExtractionSettings, IndexSettings, UpstreamSettings
    from memproxy.index.embedder import HashEmbedder
    from memproxy.index.manager import IndexManager
    from memproxy.memory.store import MemoryStore
    from memproxy.outbox import queue as outbox
    from memproxy.outbox.capture import enqueue_turn
    from memproxy.outbox.extractor import Extractor
    from memproxy.outbox.worker import Worker
    from memproxy.scope import Scope
    from memproxy.storage.database import SqliteDatabase as Database
    from memproxy.upstream.provider import Upstream

    fake, upstream_url = upstream
    marker, scope = unique("leased"), Scope("t", "u", "")

    async def scenario() -> outbox.Job | None:
        db = Database(tmp_path / "memproxy.sqlite3")
        await db.open()
        try:
            embedder = HashEmbedder(64)
            store = MemoryStore(db, embedder, IndexManager(db, tmp_path, embedder, IndexSettings()))
            upstream_settings = UpstreamSettings(api_base=upstream_url)
            settings = ExtractionSettings(model="hang", poll_interval_s=0.02)
            worker = Worker(
                db, store, Extractor(Upstream(upstream_settings), settings, upstream_settings), settings
            )
            job_id = outbox.new_job_id()
            await enqueue_turn(db, job_id, scope, "", [{"role": "user", "content": marker}], time.time())
            task = asyncio.create_task(worker.run())
            await asyncio.to_thread(wait_until, lambda: extraction_calls(fake, marker))
            running = await db.run(lambda c: outbox.get_job(c, "t", job_id))
            assert running is not None and running.status == "running"
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            return await db.run(lambda c: outbox.get_job(c, "t", job_id))
        finally:
            await db.close()

    released = asyncio.run(scenario())
    assert released is not None
    assert (released.status, released.attempts, released.lease_owner) == ("pending", 0, None)


@pytest.mark.parametrize("fast_path", ["auto", "off"])
def test_extraction_takes_the_relay_when_the_route_is_openai_wire(
    upstream: tuple[ScriptedUpstream, str], tmp_path: Path, fast_path: str
) -> None:
    """The worker's call goes the chat request's road: relayed (no LiteLLM client in the way:
    no OpenAI-SDK headers reach the provider) or through LiteLLM; a provider error is kept
    as the job's last error either way."""
    fake, upstream_url = upstream
    fails = proxy_settings(upstream_url, tmp_path / fast_path, upstream={"fast_path": fast_path},
                           extraction={"model": "fail-429", "max_attempts": 1})  # fmt: skip
    server, handle = start_proxy(fails)
    try:
        name = unique("Nia")
        dead = wait_job(handle.url, say(handle, f"My name is {name}", user=unique("u")).job_id, status="dead")
        assert "scripted failure 429" in dead["last_error"]
        (call,) = [r for r in fake.chat_requests(extraction=True) if name in json.dumps(r.body)]
        assert call.body["model"] == "fail-429" and call.body["max_tokens"] == fails.extraction.max_tokens
        assert ("x-stainless-lang" in call.headers) is (fast_path == "off")
    finally:
        server.stop()
