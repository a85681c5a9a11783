"""``QueryBatcher``: queries that arrive while a call runs share the next call."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from memproxy.index.embedders.base import Vectors
from memproxy.index.embedders.batching import QueryBatcher


class GatedModel:
    """Rows that say which text they embed; the first call waits until the test lets it go."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.started = threading.Event()
        self.release = threading.Event()
        self.fail_on: str | None = None

    def run(self, texts: list[str]) -> Vectors:
        self.calls.append(list(texts))
        self.started.set()
        assert self.release.wait(timeout=30)
        if self.fail_on in texts:
            raise ValueError("model failed")
        return np.array([[float(len(t)), float(sum(map(ord, t)))] for t in texts], dtype=np.float32)


def expected(text: str) -> list[float]:
    return [float(len(text)), float(sum(map(ord, text)))]


def test_queries_arriving_during_a_call_are_embedded_together_next() -> None:
    model = GatedModel()
    batcher = QueryBatcher(model.run, max_batch=3)
    sizes: list[int] = []
    batcher.on_batch = sizes.append

    async def scenario() -> None:
        first = asyncio.ensure_future(batcher.embed("a"))
        await asyncio.to_thread(model.started.wait)  # the first call is running now
        later = [asyncio.ensure_future(batcher.embed(t)) for t in ("bb", "ccc", "dddd", "eeeee")]
        await asyncio.sleep(0)  # let them queue (no timing involved: one loop turn)
        model.release.set()
        assert (await first).tolist() == expected("a")
        for task, text in zip(later, ("bb", "ccc", "dddd", "eeeee"), strict=True):
            assert (await task).tolist() == expected(text)  # each caller its own row

    asyncio.run(scenario())
    assert model.calls == [["a"], ["bb", "ccc", "dddd"], ["eeeee"]]  # at most max_batch, in order
    assert sizes == [1, 3, 1]


def test_a_failed_call_fails_its_callers_only_and_a_cancelled_caller_leaves_quietly() -> None:
    model = GatedModel()
    model.fail_on = "boom"
    batcher = QueryBatcher(model.run)

    async def scenario() -> None:
        first = asyncio.ensure_future(batcher.embed("x"))
        await asyncio.to_thread(model.started.wait)
        doomed = [asyncio.ensure_future(batcher.embed(t)) for t in ("boom", "y")]
        gone = asyncio.ensure_future(batcher.embed("gone"))
        await asyncio.sleep(0)
        gone.cancel()
        model.release.set()
        assert (await first).tolist() == expected("x")
        for task in doomed:
            with pytest.raises(ValueError, match="model failed"):
                await task
        with pytest.raises(asyncio.CancelledError):
            await gone
        # The batcher still works after a failed call.
        assert (await batcher.embed("z")).tolist() == expected("z")

    asyncio.run(scenario())
    assert model.calls == [["x"], ["boom", "y"], ["z"]]  # the cancelled query was not embedded


def test_a_lone_query_runs_at_once_without_waiting_for_company() -> None:
    model = GatedModel()
    model.release.set()
    batcher = QueryBatcher(model.run)

    async def twice() -> None:
        assert (await batcher.embed("one")).tolist() == expected("one")
        assert (await batcher.embed("two")).tolist() == expected("two")

    asyncio.run(twice())
    asyncio.run(twice())  # a second event loop: the batcher starts afresh
    assert model.calls == [["one"], ["two"], ["one"], ["two"]]
