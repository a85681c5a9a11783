"""The long-lived parts of one running app, opened in ``app.lifespan`` and closed there.

Invariants:
- Nothing here exists before the lifespan starts; routes reach it through ``deps``
  (``request.app.state.services``), never through module globals.
- Every background task is owned by ``Services.tasks``: started after the parts it uses
  are open, cancelled and awaited in ``close`` before those parts close.
- On close, index snapshots are written before the database closes, so a clean restart
  loads snapshots instead of rebuilding.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from memproxy.auth import Authenticator
from memproxy.config import Settings
from memproxy.index.embedder import Embedder
from memproxy.index.manager import IndexManager
from memproxy.memory.management import MemoryManagement
from memproxy.memory.store import MemoryStore, build_store
from memproxy.metrics import Metrics
from memproxy.outbox import queue
from memproxy.outbox.capture import Capture
from memproxy.outbox.extractor import Extractor
from memproxy.outbox.spool import Spool, drain_periodically
from memproxy.outbox.worker import Worker
from memproxy.proxy.recall import Recaller
from memproxy.storage.database import Database, open_database
from memproxy.storage.engine import JOBS_CHANNEL, DatabaseUnavailable
from memproxy.upstream.fastpath import FastPaths
from memproxy.upstream.model_access import CredentialGap, memory_credential_gaps, warn_about
from memproxy.upstream.provider import Upstream
from memproxy.upstream.relay import Relay
from memproxy.upstream.surfaces import SurfaceUpstream

log = logging.getLogger("memproxy.services")


@dataclass
class Services:
    settings: Settings
    auth: Authenticator
    upstream: Upstream
    db: Database
    embedder: Embedder
    index: IndexManager
    store: MemoryStore
    recaller: Recaller
    capture: Capture
    # The Responses and Anthropic Messages APIs' provider calls (routed like ``upstream``).
    surfaces: SurfaceUpstream
    # OpenAI-wire routes, relayed byte for byte through ``relay`` (its pool is closed in ``close``).
    fast_paths: FastPaths
    relay: Relay
    # The memory operations the REST routes and the MCP tools call (built once, stateless).
    management: MemoryManagement
    metrics: Metrics = field(default_factory=Metrics)
    tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    # The in-process extraction worker (None when ``extraction.worker_enabled`` is false).
    worker: Worker | None = None
    # Flipped once every part has started; read by /readyz.
    ready: bool = False
    # Memory's own model calls that will lack credentials (``model_access``); /readyz shows them.
    credential_gaps: list[CredentialGap] = field(default_factory=list)

    def start_task(self, name: str, work: Callable[[], Awaitable[None]]) -> None:
        """Run ``work`` as an owned background task; a crash is logged and shows in /readyz."""

        async def guarded() -> None:
            try:
                await work()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("background task %s failed", name)
                raise

        self.tasks[name] = asyncio.create_task(guarded(), name=f"memproxy-{name}")

    def memory_status(self) -> dict[str, object]:
        """For /readyz: memory works, or is degraded and why (the proxy itself still serves)."""
        if not self.credential_gaps:
            return {"status": "ok"}
        return {"status": "degraded", "problems": [gap.message() for gap in self.credential_gaps]}

    def health_problems(self) -> list[str]:
        problems = [
            f"task {name} failed"
            for name, task in self.tasks.items()
            if task.done() and not task.cancelled() and task.exception() is not None
        ]
        if not self.db.is_open:
            problems.append("database closed")
        if not self.embedder.loaded:
            problems.append(f"embedding model {self.embedder.identity} loading")
        return problems

    async def stop_tasks(self) -> None:
        for task in self.tasks.values():
            task.cancel()
        for name, task in self.tasks.items():
            try:
                await task
            except asyncio.CancelledError:
                pass
            except Exception:  # already logged by ``guarded``
                log.debug("task %s had failed", name)
        self.tasks.clear()

    async def degradations(self) -> list[str]:
        """Why this replica serves in a degraded way right now (for /readyz); [] if it does not."""
        notes = []
        if self.db.engine == "postgres" and self.db.is_open:
            try:
                await self.db.run(lambda c: c.execute("SELECT 1").fetchone())
            except DatabaseUnavailable as exc:
                notes.append(f"database unavailable ({exc}): recall fails open, captured turns are spooled")
        spool = self.capture.spool
        pending = await asyncio.to_thread(spool.pending) if spool is not None else 0
        if pending:
            notes.append(f"{pending} captured turn(s) spooled on disk, waiting for the database")
        return notes

    async def refresh_metrics(self) -> None:
        """Bring the gauges that mirror stored state up to date (called per scrape)."""
        jobs: dict[str, int] | None
        try:
            jobs = await self.db.run(queue.count_by_status) if self.db.is_open else {}
        except DatabaseUnavailable:
            jobs = None  # Postgres is away: the job gauges keep their last values
        spool = self.capture.spool
        spooled = await asyncio.to_thread(spool.pending) if spool is not None else 0
        self.metrics.set_state(jobs, self.index.loaded_scopes(), self.index.held_vectors(), spooled)

    async def close(self) -> None:
        # Each phase is logged with its duration: a shutdown that is slow says where.
        started = time.perf_counter()
        self.ready = False
        await self.stop_tasks()
        log.info("shutdown: background tasks stopped (%.2fs)", time.perf_counter() - started)
        await self.recaller.close()
        try:
            await self.relay.close()
            written = await self.index.snapshot_dirty()
            log.info("shutdown: %d index snapshot(s) written (%.2fs)", written, time.perf_counter() - started)
        finally:
            await self.db.close()
            log.info("shutdown: database closed (%.2fs)", time.perf_counter() - started)


async def open_services(settings: Settings, metrics: Metrics | None = None) -> Services:
    """Open the database and build every part; the caller starts background work."""
    db = open_database(settings.storage)
    await db.open()
    try:
        store = build_store(db, settings)
        embedder, index = store.embedder, store.index
        metrics = metrics or Metrics()
        store.on_refused = metrics.memory_refused
        upstream = Upstream(settings.upstream, settings.server)
        gaps = memory_credential_gaps(settings)
        warn_about(gaps)
        # Postgres may be away for a while; SQLite is a local file that is never "away".
        spool = Spool(settings.storage.data_dir / "spool") if db.engine == "postgres" else None
        relay = Relay()
        await relay.open()
        capture = Capture(db, clock=store.clock, spool=spool)
        return Services(
            settings=settings,
            credential_gaps=gaps,
            auth=Authenticator(settings.auth),
            upstream=upstream,
            db=db,
            embedder=embedder,
            index=index,
            store=store,
            recaller=Recaller(store, embedder, settings.recall, settings.upstream, metrics),
            capture=capture,
            surfaces=SurfaceUpstream(upstream),
            fast_paths=FastPaths(upstream, settings.upstream.fast_path),
            relay=relay,
            management=MemoryManagement(store, capture, index, settings.recall.min_score),
            metrics=metrics,
        )
    except BaseException:
        await db.close()
        raise


async def snapshot_periodically(services: Services) -> None:
    interval = services.settings.index.snapshot_interval_s
    while True:
        await asyncio.sleep(interval)
        try:
            written = await services.index.snapshot_dirty()
        except DatabaseUnavailable:
            continue  # snapshots catch up from the change log first; next round
        if written:
            log.info("wrote %d index snapshot(s)", written)


FORGET_POLL_S = 1.0
SPOOL_DRAIN_S = 0.5


def start_replica_tasks(services: Services) -> None:
    """What every ``serve`` process runs beside the requests: snapshots, forgets made
    elsewhere, and (Postgres) moving spooled turns into the outbox."""
    services.start_task("snapshots", lambda: snapshot_periodically(services))
    services.start_task("forgets", lambda: follow_forgets(services))
    spool = services.capture.spool
    if spool is not None:
        services.capture.on_spooled = services.metrics.capture_spooled_one
        services.start_task("spool", lambda: drain_periodically(spool, services.db, SPOOL_DRAIN_S))


async def follow_forgets(services: Services) -> None:
    """Drop this process's index and snapshot files of scopes forgotten elsewhere (another
    replica, a worker, an operator tool), within about a second of the forget."""
    while True:
        try:
            await services.index.drop_forgotten()
        except DatabaseUnavailable:
            pass  # the forget itself cannot have happened meanwhile either; try again later
        await asyncio.sleep(FORGET_POLL_S)


async def reembed_in_background(services: Services) -> None:
    done = await services.store.reembed_stale()
    if done:
        log.info("re-embedded %d memories with %s", done, services.embedder.identity)


def build_worker(services: Services) -> Worker:
    """The worker for an open ``Services``: its extractor, metrics and capture wake-up wired."""
    settings = services.settings
    extractor = Extractor(services.upstream, settings.extraction, settings.upstream,
                          max_chars=settings.memory.max_chars, fast=(services.fast_paths, services.relay))  # fmt: skip
    extractor.credential_gap = next(
        (gap.message() for gap in services.credential_gaps if gap.setting == "extraction.model"), None
    )
    worker = Worker(services.db, services.store, extractor, settings.extraction, clock=services.store.clock,
                    on_attempt=services.metrics.extraction_attempt,
                    on_empty=services.metrics.extraction_empty_answer, memory=settings.memory)  # fmt: skip
    services.capture.on_enqueued = worker.notify
    return worker


def start_worker(services: Services) -> Worker:
    """Run the in-process worker as an owned task of ``services`` (stopped by ``close``)."""
    worker = build_worker(services)
    services.worker = worker
    _start_worker_tasks(services, worker)
    return worker


def _start_worker_tasks(services: Services, worker: Worker) -> None:
    services.start_task("worker", worker.run)
    if services.db.engine == "postgres":
        # A job enqueued by any replica wakes this worker at once (NOTIFY at commit);
        # the worker's own poll stays as the fallback while the listener reconnects.
        services.start_task("wakeups", lambda: services.db.listen(JOBS_CHANNEL, worker.notify))


async def run_worker_process(settings: Settings) -> None:
    """``memproxy worker``: drain the outbox of the data dir until SIGTERM/SIGINT."""
    services = await open_services(settings)
    try:
        await services.store.start()
        worker = build_worker(services)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        _start_worker_tasks(services, worker)
        services.start_task("forgets", lambda: follow_forgets(services))
        await stop.wait()
    finally:
        await services.close()  # cancels the worker, which releases its leases
