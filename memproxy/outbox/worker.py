"""The extraction worker: claims outbox jobs, asks the extractor, applies its operations.

Runs inside ``memproxy serve`` (an owned task of ``Services``, ``extraction.concurrency``
loops) or alone as ``memproxy worker`` on the same data dir.

Invariants:
- A batch is the leased jobs of one scope (coalesced, at most ``max_jobs_per_call``):
  one extraction call per batch, whatever the number of turns.
- Embeddings are computed before the write transaction; the memory rows, history rows,
  change log and the jobs' completion then commit in ONE transaction, which first checks
  the lease is still ours. So a crash or a lost lease at any point either leaves the
  jobs to be claimed again with no effects written, or has written effects *and*
  completion: a turn is never lost and never applied twice.
- The FAISS index is not touched here: it replays ``changes`` before its next search.
- While a batch is being worked on its lease is extended (heartbeat), so a slow
  extraction is not taken over by another worker; a dead worker's lease just expires.
- Stopping cancels the loops and releases this worker's leases (jobs go back to pending
  without spending an attempt).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt

from memproxy.config import ExtractionSettings
from memproxy.db import Database
from memproxy.engine import Connection, DatabaseUnavailable
from memproxy.memory import rows
from memproxy.memory.rows import DuplicateMemory, Memory
from memproxy.memory.store import MemoryStore
from memproxy.messages import user_text
from memproxy.outbox import queue as outbox
from memproxy.outbox.extractor import (
    MAX_QUERY_CHARS,
    ExtractionError,
    ExtractionInput,
    Extractor,
    Operation,
    today,
)
from memproxy.outbox.queue import Job, LeaseLost
from memproxy.scope import Scope

log = logging.getLogger(__name__)


@dataclass
class _Batch:
    jobs: list[Job]
    new_messages: list[dict[str, Any]]
    earlier_messages: list[dict[str, Any]]
    session_id: str


def _read_batch(conn: Connection, jobs: list[Job], context_limit: int) -> _Batch:
    found = outbox.job_messages(conn, [job.id for job in jobs])
    first_num: dict[str, int] = {}
    for num, session_id, _ in found:
        first_num.setdefault(session_id, num)
    earlier: list[dict[str, Any]] = []
    for session_id, num in first_num.items():
        earlier += outbox.earlier_messages(
            conn, jobs[0].tenant, jobs[0].scope_key, session_id, num, context_limit
        )
    earlier = earlier[-context_limit:] if context_limit else []
    return _Batch(jobs, [message for _, _, message in found], earlier, jobs[-1].session_id)


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Worker:
    def __init__(
        self,
        db: Database,
        store: MemoryStore,
        extractor: Extractor,
        settings: ExtractionSettings,
        *,
        owner: str | None = None,
        clock: Callable[[], float] = time.time,
        on_attempt: Callable[[bool, int, int], None] | None = None,
    ) -> None:
        self.db = db
        self.store = store
        self.extractor = extractor
        self.settings = settings
        self.owner = owner or default_owner()
        self.clock = clock
        # Reports each extraction call (ok?, prompt tokens, completion tokens) to metrics.
        self.on_attempt = on_attempt
        self._wake = asyncio.Event()

    def notify(self) -> None:
        """A job was just enqueued: wake idle loops now instead of at the next poll."""
        self._wake.set()

    async def run(self) -> None:
        """Work until cancelled, then give back every lease this worker holds."""
        log.info("extraction worker %s started (%d loop(s))", self.owner, self.settings.concurrency)
        try:
            async with asyncio.TaskGroup() as group:
                for n in range(self.settings.concurrency):
                    group.create_task(self._loop(), name=f"memproxy-worker-{n}")
        finally:
            try:
                released = await self.db.run(self._release)
            except DatabaseUnavailable:
                log.warning("extraction worker %s stopped; database away, its leases will expire", self.owner)
            else:
                log.info("extraction worker %s stopped; %d lease(s) released", self.owner, released)

    def _release(self, conn: Connection) -> int:
        with conn:
            return outbox.release(conn, self.owner, self.clock())

    async def _loop(self) -> None:
        while True:
            try:
                worked = await self.run_once()
            except asyncio.CancelledError:
                raise
            except DatabaseUnavailable:
                worked = 0  # Postgres away: poll again; leases of a batch in flight just expire
            except Exception:
                log.exception("extraction worker loop error")
                worked = 0
            if not worked:
                await self._idle()

    async def _idle(self) -> None:
        # ``asyncio.timeout``, not ``wait_for``: on Python 3.11 ``wait_for`` swallows a
        # cancel that arrives as the wake-up completes, and the worker never stopped.
        try:
            async with asyncio.timeout(self.settings.poll_interval_s):
                await self._wake.wait()
        except TimeoutError:
            pass
        self._wake.clear()

    async def run_once(self) -> int:
        """Claim and process one batch; returns how many jobs it held (0: nothing due)."""
        s = self.settings
        now = self.clock()
        jobs = await self.db.run(lambda c: outbox.claim(c, self.owner, now, s.lease_s, s.max_jobs_per_call))
        if not jobs:
            return 0
        heartbeat = asyncio.create_task(self._keep_leased([job.id for job in jobs]))
        try:
            await self._process(jobs)
        finally:
            heartbeat.cancel()
            try:
                await heartbeat
            except asyncio.CancelledError:
                pass
        return len(jobs)

    async def _keep_leased(self, job_ids: list[str]) -> None:
        lease_s = self.settings.lease_s
        while True:
            await asyncio.sleep(lease_s / 3)
            with contextlib.suppress(DatabaseUnavailable):  # retried at the next beat
                await self.db.run(
                    partial(
                        outbox.extend, job_ids=job_ids, owner=self.owner, lease_until=self.clock() + lease_s
                    )
                )

    async def _process(self, jobs: list[Job]) -> None:
        limit = self.settings.context_messages
        batch = await self.db.run(lambda c: _read_batch(c, jobs, limit))
        usage = (0, 0)
        try:
            data = ExtractionInput(batch.new_messages, batch.earlier_messages,
                                   await self._similar(jobs[0].scope, batch.new_messages), today(self.clock()))  # fmt: skip
            result = await self.extractor.extract(data)
            usage = (result.prompt_tokens, result.completion_tokens)
            self._count_tokens(usage)
            vectors = await self._embed(result.operations)
            await self.db.run(lambda c: self._apply(c, batch, result.operations, vectors, usage))
        except asyncio.CancelledError:
            raise
        except LeaseLost as exc:
            log.warning("batch of %d job(s) lost its lease; another worker has it: %s", len(jobs), exc)
        except Exception as exc:
            if isinstance(exc, ExtractionError):
                usage = exc.usage
            if usage == (0, 0) or isinstance(exc, ExtractionError):
                self._count_tokens(usage, ok=False)  # the call failed (or its answer did)
            await self._fail(jobs, exc, usage)

    def _count_tokens(self, usage: tuple[int, int], ok: bool = True) -> None:
        if self.on_attempt is not None:
            self.on_attempt(ok, usage[0], usage[1])

    async def _similar(self, scope: Scope, messages: list[dict[str, Any]]) -> list[Memory]:
        top_k = self.settings.similar_memories
        query = user_text(messages, MAX_QUERY_CHARS) or "\n".join(
            str(m.get("content") or "") for m in messages
        )
        if top_k <= 0 or not query.strip():
            return []
        return [memory for memory, _score in await self.store.search(scope, query, top_k=top_k)]

    async def _embed(self, operations: list[Operation]) -> list[npt.NDArray[np.float32] | None]:
        texts = [op.text for op in operations if op.text is not None]
        vectors = iter(await self.store.embedder.embed(texts)) if texts else iter(())
        return [
            np.asarray(next(vectors), dtype=np.float32) if op.text is not None else None for op in operations
        ]

    async def _fail(self, jobs: list[Job], exc: Exception, usage: tuple[int, int]) -> None:
        error = f"{type(exc).__name__}: {exc}"
        s, now = self.settings, self.clock()

        def write(conn: Connection) -> list[str]:
            with conn:
                return outbox.fail(conn, jobs, self.owner, error, now, max_attempts=s.max_attempts,
                                   backoff_base_s=s.backoff_base_s, backoff_max_s=s.backoff_max_s,
                                   prompt_tokens=usage[0], completion_tokens=usage[1])  # fmt: skip

        try:
            dead = await self.db.run(write)
        except LeaseLost:
            log.warning("failed batch had lost its lease; leaving it to its new owner")
            return
        log.warning("extraction of %d job(s) failed (%s)%s", len(jobs), error,
                    f"; dead: {', '.join(dead)}" if dead else "; will retry")  # fmt: skip

    def _apply(
        self,
        conn: Connection,
        batch: _Batch,
        operations: list[Operation],
        vectors: list[npt.NDArray[np.float32] | None],
        usage: tuple[int, int],
    ) -> None:
        """Effects and completion in one transaction; ``LeaseLost`` rolls everything back."""
        now, identity = self.clock(), self.store.embedder.identity
        scope = batch.jobs[0].scope
        counts = {"ADD": 0, "UPDATE": 0, "DELETE": 0}
        with conn:
            outbox.complete(conn, [job.id for job in batch.jobs], self.owner, now,
                            prompt_tokens=usage[0], completion_tokens=usage[1])  # fmt: skip
            job_ids = [job.id for job in batch.jobs]
            for op, vector in zip(operations, vectors, strict=True):
                if _apply_one(conn, scope, op, vector, identity, batch.session_id, now, job_ids):
                    counts[op.op] += 1


def _apply_one(
    conn: Connection,
    scope: Scope,
    op: Operation,
    vector: npt.NDArray[np.float32] | None,
    identity: str,
    session_id: str,
    now: float,
    job_ids: list[str],
) -> bool:
    """Apply one validated operation; False when it turned out to be a no-op.

    History rows name ``job_ids``, the batch's captured turns the change came from.
    """
    if op.op == "DELETE" and op.memory_id is not None:
        return rows.delete_memory(
            conn, scope.tenant, op.memory_id, source="extracted", now=now, job_ids=job_ids
        )
    assert op.text is not None
    if op.op == "UPDATE" and op.memory_id is not None:
        current = rows.get_memory(conn, scope.tenant, op.memory_id, now)
        if current is not None:
            if rows.normalize_text(current.text) == rows.normalize_text(op.text):
                return False
            try:
                rows.update_memory(conn, scope.tenant, op.memory_id, source="extracted", now=now, text=op.text,
                                   embedding=vector, embed_model=identity, job_ids=job_ids)  # fmt: skip
            except DuplicateMemory:
                # The new text already is another memory: this one is superseded.
                rows.delete_memory(conn, scope.tenant, op.memory_id, source="extracted", now=now,
                                   job_ids=job_ids)  # fmt: skip
            return True
        # Deleted or expired while we extracted: the fact is still news, so add it.
    try:
        rows.insert_memory(conn, scope, op.text, embedding=vector, embed_model=identity, source="extracted",
                           now=now, session_id=session_id, job_ids=job_ids)  # fmt: skip
    except DuplicateMemory:
        return False
    return True
