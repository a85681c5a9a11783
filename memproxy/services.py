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
from memproxy.db import Database, open_database
from memproxy.index.embedder import Embedder
from memproxy.index.manager import IndexManager
from memproxy.memory.store import MemoryStore, build_store
from memproxy.metrics import Metrics
from memproxy.model_access import CredentialGap, memory_credential_gaps, warn_about
from memproxy.outbox import queue
from memproxy.outbox.capture import Capture
from memproxy.outbox.extractor import Extractor
from memproxy.outbox.worker import Worker
from memproxy.proxy.recall import Recaller
from memproxy.upstream import Upstream
from memproxy.upstream_surfaces import SurfaceUpstream

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

    async def refresh_metrics(self) -> None:
        """Bring the gauges that mirror stored state up to date (called per scrape)."""
        jobs = await self.db.run(queue.count_by_status) if self.db.is_open else {}
        self.metrics.set_state(jobs, self.index.loaded_scopes(), self.index.held_vectors())

    async def close(self) -> None:
        # Each phase is logged with its duration: a shutdown that is slow says where.
        started = time.perf_counter()
        self.ready = False
        await self.stop_tasks()
        log.info("shutdown: background tasks stopped (%.2fs)", time.perf_counter() - started)
        await self.recaller.close()
        try:
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
        upstream = Upstream(settings.upstream)
        gaps = memory_credential_gaps(settings)
        warn_about(gaps)
        return Services(
            settings=settings,
            credential_gaps=gaps,
            auth=Authenticator(settings.auth),
            upstream=upstream,
            db=db,
            embedder=embedder,
            index=index,
            store=store,
            recaller=Recaller(store, embedder, settings.recall, settings.upstream),
            capture=Capture(db, clock=store.clock),
            surfaces=SurfaceUpstream(upstream),
            metrics=metrics,
        )
    except BaseException:
        await db.close()
        raise


async def snapshot_periodically(services: Services) -> None:
    interval = services.settings.index.snapshot_interval_s
    while True:
        await asyncio.sleep(interval)
        written = await services.index.snapshot_dirty()
        if written:
            log.info("wrote %d index snapshot(s)", written)


async def reembed_in_background(services: Services) -> None:
    done = await services.store.reembed_stale()
    if done:
        log.info("re-embedded %d memories with %s", done, services.embedder.identity)


def build_worker(services: Services) -> Worker:
    """The worker for an open ``Services``: its extractor, metrics and capture wake-up wired."""
    settings = services.settings
    extractor = Extractor(services.upstream, settings.extraction, settings.upstream)
    extractor.credential_gap = next(
        (gap.message() for gap in services.credential_gaps if gap.setting == "extraction.model"), None
    )
    worker = Worker(services.db, services.store, extractor, settings.extraction, clock=services.store.clock,
                    on_attempt=services.metrics.extraction_attempt)  # fmt: skip
    services.capture.on_enqueued = worker.notify
    return worker


def start_worker(services: Services) -> Worker:
    """Run the in-process worker as an owned task of ``services`` (stopped by ``close``)."""
    worker = build_worker(services)
    services.worker = worker
    services.start_task("worker", worker.run)
    return worker


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
        services.start_task("worker", worker.run)
        await stop.wait()
    finally:
        await services.close()  # cancels the worker, which releases its leases
