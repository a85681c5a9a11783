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

from memproxy.config import ExtractionSettings, MemorySettings
from memproxy.memory.rows import Memory
from memproxy.memory.store import MemoryStore
from memproxy.outbox import queue as outbox
from memproxy.outbox.apply import Context, Planned, Report, Writer, apply_planned, plan, states_facts
from memproxy.outbox.extractor import MAX_QUERY_CHARS, ExtractionResult, Extractor
from memproxy.outbox.operations import ExtractionError
from memproxy.outbox.prompt import ExtractionInput
from memproxy.outbox.queue import Job, LeaseLost
from memproxy.scope import Scope
from memproxy.storage.database import Database
from memproxy.storage.engine import Connection, DatabaseUnavailable
from memproxy.wire.message_text import message_text, user_text

log = logging.getLogger(__name__)


# A failed attempt's error that is about the answer (not the provider) goes back to the
# model as feedback on the next attempt.
_ANSWER_ERROR = f"{ExtractionError.__name__}: "


@dataclass
class _Batch:
    jobs: list[Job]
    new_messages: list[dict[str, Any]]
    times: list[float]  # when each new message was captured: its job's creation time
    earlier_messages: list[dict[str, Any]]
    session_id: str

    @property
    def turns(self) -> list[tuple[float, str]]:
        return [(ts, message_text(m)) for ts, m in zip(self.times, self.new_messages, strict=True)]


def _read_batch(conn: Connection, jobs: list[Job], context_limit: int) -> _Batch:
    found, times = [], []
    for job in jobs:  # one query per job (at most max_jobs_per_call) to keep each turn's date
        messages = outbox.job_messages(conn, [job.id])
        found += messages
        times += [job.created_at] * len(messages)
    first_num: dict[str, int] = {}
    for num, session_id, _ in found:
        first_num.setdefault(session_id, num)
    earlier: list[dict[str, Any]] = []
    for session_id, num in first_num.items():
        earlier += outbox.earlier_messages(
            conn, jobs[0].tenant, jobs[0].scope_key, session_id, num, context_limit
        )
    earlier = earlier[-context_limit:] if context_limit else []
    return _Batch(jobs, [message for _, _, message in found], times, earlier, jobs[-1].session_id)


def _feedback(jobs: list[Job]) -> str | None:
    """The previous attempt's answer error, if that is why this is a retry."""
    for job in jobs:
        if job.attempts > 1 and job.last_error and job.last_error.startswith(_ANSWER_ERROR):
            return job.last_error[len(_ANSWER_ERROR) :]
    return None


@dataclass
class _Outcome:
    """An extraction's guarded operations with what they need to be written."""

    planned: list[Planned]
    vectors: list[npt.NDArray[np.float32] | None]
    candidates: list[list[int]]
    report: Report


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
        on_empty: Callable[[], None] | None = None,
        memory: MemorySettings | None = None,
    ) -> None:
        self.db = db
        self.store = store
        self.extractor = extractor
        self.settings = settings
        self.owner = owner or default_owner()
        self.clock = clock
        # Reports each extraction call (ok?, prompt tokens, completion tokens) to metrics.
        self.on_attempt = on_attempt
        # Counts answers with no operation for turns that plainly state facts.
        self.on_empty = on_empty
        self.memory = memory or MemorySettings()
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
            memories = await self._similar(jobs[0].scope, batch.new_messages)
            data = ExtractionInput(batch.new_messages, batch.earlier_messages, memories, batch.times,
                                   feedback=_feedback(jobs), attempt=max(job.attempts for job in jobs))  # fmt: skip
            result = await self.extractor.extract(data)
            usage = (result.prompt_tokens, result.completion_tokens)
            self._count_tokens(usage)
            outcome = await self._guard(batch, memories, result)
            await self.db.run(lambda c: self._apply(c, batch, outcome, usage))
            self._report(jobs, outcome.report)
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

    async def _guard(self, batch: _Batch, memories: list[Memory], result: ExtractionResult) -> _Outcome:
        """Guard the model's operations, embed what will be written, find near-duplicate candidates."""
        ctx = Context(batch.turns, {m.id: m for m in memories}, self.memory.max_chars)
        planned, refused = plan(result.operations, ctx)
        report = Report(rejected=[*result.rejected, *refused])
        stated = user_text(batch.new_messages, MAX_QUERY_CHARS)
        report.empty_answer = not result.operations and not result.rejected and states_facts(stated)
        texts = [p.text for p in planned if p.text is not None]
        embedded = iter(await self.store.embedder.embed(texts)) if texts else iter(())
        vectors = [
            np.asarray(next(embedded), dtype=np.float32) if p.text is not None else None for p in planned
        ]
        candidates: list[list[int]] = []
        for p, vector in zip(planned, vectors, strict=True):
            found = [] if p.text is None else await self.store.search(batch.jobs[0].scope, p.text, top_k=5,
                                                                       query_vector=vector)  # fmt: skip
            candidates.append([memory.num for memory, _ in found])
        return _Outcome(planned, vectors, candidates, report)

    def _report(self, jobs: list[Job], report: Report) -> None:
        """Count and log what the guards refused and an empty answer (after the commit)."""
        for rejected in report.rejected:
            if self.store.on_refused is not None:
                self.store.on_refused(rejected.reason, "extracted")
        if report.rejected:
            reasons = sorted({r.reason for r in report.rejected})
            log.info("extraction of %d job(s): %d operation(s) refused (%s)", len(jobs), len(report.rejected),
                     ", ".join(reasons))  # fmt: skip
        if report.empty_answer:
            log.warning(
                "extraction of %d job(s) answered no operation for a turn that states facts", len(jobs)
            )
            if self.on_empty is not None:
                self.on_empty()

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
        # Ungated: the extractor must see what the turn could update ("I moved to Porto" vs
        # "User lives in Lisbon" shares no word, and the hash embedder sees no likeness).
        return [memory for memory, _score in await self.store.search(scope, query, top_k=top_k, gate=False)]

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

    def _apply(self, conn: Connection, batch: _Batch, outcome: _Outcome, usage: tuple[int, int]) -> None:
        """Effects, report and completion in one transaction; ``LeaseLost`` rolls everything back."""
        job_ids = [job.id for job in batch.jobs]
        writer = Writer(conn, batch.jobs[0].scope, self.store.embedder.identity, batch.session_id, self.clock(),
                        job_ids, self.memory.near_duplicate_cosine, outcome.report)  # fmt: skip
        with conn:
            apply_planned(writer, outcome.planned, outcome.vectors, outcome.candidates)
            outbox.complete(conn, job_ids, self.owner, writer.now, prompt_tokens=usage[0],
                            completion_tokens=usage[1], report=outcome.report.to_api())  # fmt: skip
