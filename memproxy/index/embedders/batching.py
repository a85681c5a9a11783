"""Micro-batching of query embeddings: queries that arrive while one embedder call runs are
embedded together in the next call.

On the request path every chat request embeds one short query. One model call on many short
texts costs much less than as many calls on one (MiniLM on 2 cores: ~6.5 ms of CPU for one
16-token query, ~2.8 ms per query in a batch of 32), so under concurrency the queries that
queue while a call runs share the next one. A query that finds no call running starts one at
once: at concurrency 1 nothing waits for company.

Invariants:
- Each caller gets the row of its own text, whatever else shared the call.
- At most one call runs at a time per batcher and event loop (the other core serves the
  loop); a call takes at most ``max_batch`` queries, in arrival order.
- A caller that is cancelled (recall's timeout) leaves the batch without disturbing it; an
  error in a call is raised to every caller of that call, and the next call still runs.
- The batch runs on a worker thread (``asyncio.to_thread``), never on the event loop.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from memproxy.index.embedders.base import Vectors

Vector = npt.NDArray[np.float32]


@dataclass
class _Queue:
    """The queries of one event loop waiting for a call, and the task running their calls."""

    pending: list[tuple[str, asyncio.Future[Vector]]] = field(default_factory=list)
    drain: asyncio.Task[None] | None = None


class QueryBatcher:
    def __init__(self, run: Callable[[list[str]], Vectors], max_batch: int = 64) -> None:
        self.run = run  # texts -> one row per text, in order (synchronous: runs on a thread)
        self.max_batch = max(1, max_batch)
        # Called with each call's batch size (``/metrics``), on the event loop.
        self.on_batch: Callable[[int], None] | None = None
        # One queue per event loop: a future belongs to its loop, and an embedder may outlive
        # one (tests, CLI commands) or serve two at once (an app on a thread beside a test).
        self._queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Queue] = (
            weakref.WeakKeyDictionary()
        )

    async def embed(self, text: str) -> Vector:
        loop = asyncio.get_running_loop()
        queue = self._queues.get(loop)
        if queue is None:
            queue = self._queues[loop] = _Queue()
        future: asyncio.Future[Vector] = loop.create_future()
        queue.pending.append((text, future))
        if queue.drain is None or queue.drain.done():
            # A task, so queries whose requests were read in this same loop iteration join it.
            queue.drain = loop.create_task(self._run_pending(queue))
        return await future

    async def _run_pending(self, queue: _Queue) -> None:
        batch: list[tuple[str, asyncio.Future[Vector]]] = []
        try:
            while queue.pending:
                batch = [item for item in queue.pending[: self.max_batch] if not item[1].done()]
                del queue.pending[: self.max_batch]
                if batch:
                    await self._run_batch(batch)
                batch = []
        except BaseException:  # cancelled (the loop is closing): release everyone still waiting
            for _, future in batch + queue.pending:
                if not future.done():
                    future.set_exception(RuntimeError("query embedding cancelled"))
            queue.pending.clear()
            raise

    async def _run_batch(self, batch: list[tuple[str, asyncio.Future[Vector]]]) -> None:
        if self.on_batch is not None:
            self.on_batch(len(batch))
        try:
            rows = await asyncio.to_thread(self.run, [text for text, _ in batch])
        except Exception as exc:
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, future), row in zip(batch, rows, strict=True):
            if not future.done():  # its caller may have given up meanwhile
                future.set_result(row.copy())  # not a view pinning the whole batch
