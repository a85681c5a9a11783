"""Stopping the worker: a cancellation is never lost, whatever it races with.

The worker idles until a poll interval passes or ``notify`` wakes it. On Python 3.11,
``asyncio.wait_for`` returns the inner result, and so swallows the cancellation, when the
waited-for thing completes in the same loop iteration as the cancel; the loop then went on
idling and ``memproxy serve`` never finished its shutdown. That is what a captured turn
does at the moment SIGTERM stops the server (``test_shutdown``), and under load the window
is wide. The worker must stop on the first cancel.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from memproxy.config import ExtractionSettings, UpstreamSettings
from memproxy.outbox.extractor import Extractor
from memproxy.outbox.worker import Worker
from memproxy.upstream.provider import Upstream
from tests.support.storage_env import open_store


def test_a_cancel_that_races_a_wake_up_still_stops_the_worker(tmp_path: Path) -> None:
    async def scenario() -> bool:
        async with open_store(tmp_path) as store:
            settings = ExtractionSettings(model="extractor", poll_interval_s=30)
            # Never called: the outbox is empty, so nothing is extracted.
            extractor = Extractor(Upstream(UpstreamSettings()), settings, UpstreamSettings())
            worker = Worker(store.db, store, extractor, settings)
            task = asyncio.create_task(worker.run())
            await asyncio.sleep(0.3)  # idle, waiting for a wake-up or the 30 s poll
            worker.notify()  # e.g. a turn captured just as the server is told to stop
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=5)
            stopped = task in done
            if not stopped:  # leave nothing running behind a failed assertion
                task.cancel()
                await asyncio.wait({task}, timeout=5)
            return stopped and task.cancelled()

    assert asyncio.run(scenario()), "the worker swallowed its cancellation and kept running"
