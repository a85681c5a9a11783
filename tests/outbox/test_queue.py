"""The outbox's job states on each engine (SQLite file, Postgres schema): leases, coalescing, backoff, dead, retry."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import TypeVar

import pytest

from memproxy.outbox import queue as outbox
from memproxy.scope import Scope
from memproxy.storage.engine import Connection
from tests.support.storage_env import Storage

T = TypeVar("T")
ALICE = Scope("tenant-a", "alice", "")
BOB = Scope("tenant-a", "bob", "")
OTHER_TENANT = Scope("tenant-b", "alice", "")


def in_db(storage: Storage, fn: Callable[[Connection], T]) -> T:
    async def run() -> T:
        db = storage.database()
        await db.open()
        try:
            return await db.run(fn)
        finally:
            await db.close()

    return asyncio.run(run())


def enqueue(conn: Connection, scope: Scope, now: float, text: str = "hi", session: str = "s") -> str:
    job_id = outbox.new_job_id()
    with conn:
        outbox.enqueue(conn, job_id, scope, session, [{"role": "user", "content": text}], now)
    return job_id


def test_enqueue_writes_messages_and_pending_job(storage: Storage) -> None:
    def check(conn: Connection) -> None:
        job_id = enqueue(conn, ALICE, 100.0, "I live in Paris")
        job = outbox.get_job(conn, ALICE.tenant, job_id)
        assert job is not None and job.status == "pending" and job.attempts == 0
        assert outbox.job_messages(conn, [job_id]) == [
            (1, "s", {"role": "user", "content": "I live in Paris"})
        ]
        assert outbox.get_job(conn, OTHER_TENANT.tenant, job_id) is None  # tenant-filtered

    in_db(storage, check)


def test_claim_coalesces_one_scope_up_to_the_bound(storage: Storage) -> None:
    def check(conn: Connection) -> None:
        alice_jobs = [enqueue(conn, ALICE, 100.0 + i) for i in range(5)]
        enqueue(conn, BOB, 99.0)  # older, other scope: claimed first, alone
        first = outbox.claim(conn, "w1", now=200.0, lease_s=30, max_jobs=8)
        assert [j.scope for j in first] == [BOB]
        batch = outbox.claim(conn, "w1", now=200.0, lease_s=30, max_jobs=3)
        assert [j.id for j in batch] == alice_jobs[:3]
        assert all(j.status == "running" and j.lease_owner == "w1" and j.attempts == 1 for j in batch)
        # The rest of alice's scope waits while the scope holds a live lease.
        assert outbox.claim(conn, "w2", now=201.0, lease_s=30, max_jobs=8) == []

    in_db(storage, check)


def test_expired_lease_is_reclaimed_and_the_old_owner_cannot_finish(storage: Storage) -> None:
    def check(conn: Connection) -> None:
        job_id = enqueue(conn, ALICE, 100.0)
        assert [j.id for j in outbox.claim(conn, "w1", 100.0, lease_s=10, max_jobs=8)] == [job_id]
        assert outbox.claim(conn, "w2", 105.0, lease_s=10, max_jobs=8) == []  # lease still live
        taken = outbox.claim(conn, "w2", 111.0, lease_s=10, max_jobs=8)
        assert [(j.id, j.lease_owner, j.attempts) for j in taken] == [(job_id, "w2", 2)]
        with pytest.raises(outbox.LeaseLost), conn:
            outbox.complete(conn, [job_id], "w1", 112.0)
        with conn:
            outbox.complete(conn, [job_id], "w2", 112.0, prompt_tokens=7, completion_tokens=3)
        done = outbox.get_job(conn, ALICE.tenant, job_id)
        assert (
            done is not None
            and done.status == "done"
            and (done.prompt_tokens, done.completion_tokens) == (7, 3)
        )

    in_db(storage, check)


def test_failures_back_off_then_die_and_retry_requeues(storage: Storage) -> None:
    def check(conn: Connection) -> None:
        job_id = enqueue(conn, ALICE, 0.0)
        now = 0.0
        for attempt in range(1, 4):
            (job,) = outbox.claim(conn, "w", now, lease_s=60, max_jobs=8)
            assert job.attempts == attempt
            with conn:
                dead = outbox.fail(conn, [job], "w", "bad JSON", now, max_attempts=3, backoff_base_s=1.0,
                                   backoff_max_s=100.0, prompt_tokens=5)  # fmt: skip
            after = outbox.get_job(conn, ALICE.tenant, job_id)
            assert after is not None and after.last_error == "bad JSON"
            if attempt < 3:
                assert dead == [] and after.status == "pending"
                ceiling = 2.0 ** (attempt - 1)
                assert now + ceiling / 2 <= after.next_attempt_at <= now + ceiling
                assert outbox.claim(conn, "w", after.next_attempt_at - 0.01, 60, 8) == []  # not due yet
                now = after.next_attempt_at
            else:
                assert dead == [job_id] and after.status == "dead" and after.prompt_tokens == 15
        assert [j.id for j in outbox.list_jobs(conn, ALICE.tenant, "dead")] == [job_id]
        assert outbox.list_jobs(conn, OTHER_TENANT.tenant, "dead") == []
        assert outbox.claim(conn, "w", now + 1000, 60, 8) == []  # dead jobs are never claimed
        with conn:
            assert outbox.retry(conn, OTHER_TENANT.tenant, job_id, now) is None
            requeued = outbox.retry(conn, ALICE.tenant, job_id, now)
        assert requeued is not None and requeued.status == "pending" and requeued.attempts == 0
        assert [j.id for j in outbox.claim(conn, "w", now, 60, 8)] == [job_id]

    in_db(storage, check)


def test_release_gives_back_leases_without_spending_an_attempt(storage: Storage) -> None:
    def check(conn: Connection) -> None:
        job_id = enqueue(conn, ALICE, 0.0)
        outbox.claim(conn, "w1", 1.0, lease_s=60, max_jobs=8)
        with conn:
            assert outbox.release(conn, "someone-else", 2.0) == 0
            assert outbox.release(conn, "w1", 2.0) == 1
        job = outbox.get_job(conn, ALICE.tenant, job_id)
        assert job is not None and (job.status, job.attempts, job.lease_owner) == ("pending", 0, None)
        assert [j.id for j in outbox.claim(conn, "w2", 2.0, 60, 8)] == [job_id]

    in_db(storage, check)


def test_heartbeat_extends_only_own_leases(storage: Storage) -> None:
    def check(conn: Connection) -> None:
        job_id = enqueue(conn, ALICE, 0.0)
        outbox.claim(conn, "w1", 0.0, lease_s=10, max_jobs=8)
        assert outbox.extend(conn, [job_id], "w2", 100.0) == 0
        assert outbox.extend(conn, [job_id], "w1", 100.0) == 1
        assert outbox.claim(conn, "w2", 50.0, 10, 8) == []  # extended past 50

    in_db(storage, check)


def test_earlier_messages_window_is_per_session_and_bounded(storage: Storage) -> None:
    def check(conn: Connection) -> None:
        for i in range(6):
            enqueue(conn, ALICE, float(i), f"turn {i}", session="s1")
        enqueue(conn, ALICE, 7.0, "other session", session="s2")
        last = enqueue(conn, ALICE, 8.0, "new", session="s1")
        ((num, _, _),) = outbox.job_messages(conn, [last])
        window = outbox.earlier_messages(conn, ALICE.tenant, ALICE.key, "s1", num, limit=3)
        assert [m["content"] for m in window] == ["turn 3", "turn 4", "turn 5"]

    in_db(storage, check)


def test_backoff_grows_exponentially_with_jitter_and_a_cap() -> None:
    rng = random.Random(7)
    delays = [outbox.backoff_delay(n, 2.0, 20.0, rng) for n in range(1, 7)]
    for n, delay in enumerate(delays, start=1):
        ceiling = min(20.0, 2.0 * 2 ** (n - 1))
        assert ceiling / 2 <= delay <= ceiling
    assert len({round(d, 6) for d in (outbox.backoff_delay(3, 2.0, 20.0, rng) for _ in range(5))}) > 1


def test_token_shares_add_up() -> None:
    assert outbox.token_shares(10, 3) == [4, 3, 3]
    assert sum(outbox.token_shares(1001, 7)) == 1001
