"""Hybrid search over one scope: the index's candidates, their rows, scores and the second hop.

Invariants:
- Candidates come from the scope's index (FAISS and BM25, ``memproxy.index.manager``); what
  is returned is what the database holds now: the scope's change seq is read in every
  search, rows come from the index entry's row cache (valid as of the seq the index
  reflects, ``memproxy.index.rowcache``) or are read in one snapshot with that seq, and if
  the index was behind it catches up and the search runs again, so a memory deleted or
  changed elsewhere is never returned stale.
- Scores are ``memproxy.index.scoring.relevance`` of the exact cosine (from the stored
  float32 vector, not the index's, which scans fp16 copies) and the query's term coverage;
  with ``ranking.gate`` nothing without lexical or semantic evidence is returned, and small
  talk returns nothing.
- The second hop (``memproxy.index.bridges``) only inserts memories behind the result that
  led to them, never above it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import cast

import numpy as np
import numpy.typing as npt

from memproxy.index import bridges
from memproxy.index.changelog import latest_seq
from memproxy.index.embedder import Embedder
from memproxy.index.fusion import pool_size
from memproxy.index.manager import Candidates, IndexManager
from memproxy.index.scoring import (
    POOL_FACTOR,
    Ranking,
    cosine,
    cosines,
    coverage_of,
    is_small_talk,
    relevance,
    relevances,
    term_coverage,
)
from memproxy.memory import rows
from memproxy.memory.rows import Memory
from memproxy.scope import Scope
from memproxy.storage.database import Database
from memproxy.storage.engine import Connection

log = logging.getLogger(__name__)

Hydrated = dict[int, tuple[Memory, bytes | None]]  # num -> (visible row, vector blob)


class HybridSearch:
    def __init__(
        self, db: Database, embedder: Embedder, index: IndexManager, clock: Callable[[], float] = time.time
    ) -> None:
        self.db = db
        self.embedder = embedder
        self.index = index
        self.clock = clock

    async def run(
        self,
        scope: Scope,
        query: str,
        top_k: int,
        min_score: float,
        ranking: Ranking,
        query_vector: npt.NDArray[np.float32] | None = None,
    ) -> list[tuple[Memory, float]]:
        """Best first, scores in [0, 1]; ``query_vector`` skips embedding the query."""
        if not query.strip() or top_k <= 0 or (ranking.gate and is_small_talk(query)):
            return []
        vector = query_vector
        if vector is None:
            try:
                vectors = await self.embedder.embed([query], query=True)
                vector = np.asarray(vectors[0], dtype=np.float32)
            except Exception as exc:  # a down embedding provider must not break keyword search
                log.warning("query embedding failed, searching lexically only: %s", exc)
        found, hydrated = await self._candidates(scope, vector, query, top_k)
        fused = found.fused
        scored = []
        present = [num for num in found.ranked if num in hydrated]  # the rest was deleted or expired since
        coverage = coverage_of(found.term_idf)
        memories = [hydrated[num][0] for num in present]
        scores = relevances(cosines(vector, [hydrated[num][1] for num in present]),
                            [coverage(memory.text) for memory in memories], self.embedder.floor, ranking)  # fmt: skip
        for num, memory, score in zip(present, memories, scores, strict=True):
            if score is not None and score >= min_score:
                scored.append((memory, score, fused[num]))
        # The fused order (own and context evidence, ``memproxy.index.fusion``) ranks; the score
        # is the memory's own relevance, what ``min_score`` and the gate judge.
        scored.sort(key=lambda item: -item[2])
        if scored and ranking.bridges:
            scored = await self._follow_bridges(
                scope, query, vector, found.term_idf, scored, min_score, ranking
            )
        if scored and ranking.relative > 0:
            cut = scored[0][1] * ranking.relative
            scored = [item for item in scored if item[1] >= cut]
        return [(memory, score) for memory, score, _ in scored[:top_k]]

    async def _candidates(
        self, scope: Scope, vector: npt.NDArray[np.float32] | None, query: str, top_k: int
    ) -> tuple[Candidates, Hydrated]:
        """The index's candidates and their rows, as the database holds them now.

        The scope's change seq is read on the database's thread while the index is searched;
        when it equals the seq the index reflects and every candidate's row is in the index
        entry's row cache, that read is the search's only round trip. Otherwise the missing
        rows are read with the seq in one snapshot (after a catch-up if the index was behind)."""
        now, identity = self.clock(), self.embedder.identity
        count, keep = pool_size(top_k), top_k * POOL_FACTOR
        # Queued now, so it runs on the database's thread while FAISS (which releases the GIL)
        # scans on this one; if the search fails, the read still settles (its breaker too).
        seq_read = asyncio.ensure_future(self.db.run(lambda c: latest_seq(c, scope)))
        try:
            found = await self.index.search(scope, vector, query, count, keep=keep, catch_up=False)
        except BaseException:
            seq_read.add_done_callback(lambda f: f.cancelled() or f.exception())
            raise
        seq = await seq_read
        cached, missing = _split_cached(found, now)
        if seq == found.seq and not missing:
            return found, cached
        if seq != found.seq:  # changed since the index last caught up: catch up, search again
            found = await self.index.search(scope, vector, query, count, keep=keep)
            cached, missing = _split_cached(found, now)

        def read(c: Connection, nums: list[int]) -> tuple[Hydrated, int]:
            with c.read_snapshot():
                return rows.hydrate(c, scope, nums, now, identity), latest_seq(c, scope)

        fresh, seq = await self.db.run(lambda c: read(c, missing))
        if seq == found.seq:
            self.index.remember_rows(scope, found, seq, {num: fresh.get(num) for num in missing})
            return found, {**cached, **fresh}
        # Changed again meanwhile: no cached row can be trusted; read the whole pool as it is now.
        fresh, _ = await self.db.run(lambda c: read(c, found.ranked))
        return found, fresh

    async def _follow_bridges(
        self,
        scope: Scope,
        query: str,
        vector: npt.NDArray[np.float32] | None,
        term_idf: dict[str, float],
        scored: list[tuple[Memory, float, float]],
        min_score: float,
        ranking: Ranking,
    ) -> list[tuple[Memory, float, float]]:
        """Insert the memories that share a name with a top result right after that result."""
        sources = [item for item in scored[: bridges.SOURCES] if item[1] >= bridges.MIN_SOURCE_SCORE]
        if not sources:
            return scored
        followed = await self.index.follow_bridges(
            scope, query, [memory.text for memory, _, _ in sources], bridges.PER_SOURCE
        )
        ahead = {memory.num for memory, _, _ in scored[: bridges.SOURCES]}
        children: dict[int, list[int]] = {}  # source num -> bridged nums, first source wins
        for (source, _, _), nums in zip(sources, followed, strict=True):
            children[source.num] = [num for num in nums if num not in ahead]
            ahead.update(children[source.num])
        moved = {num for nums in children.values() for num in nums}
        if not moved:
            return scored
        now, identity = self.clock(), self.embedder.identity
        hydrated = await self.db.run(lambda c: rows.hydrate(c, scope, moved, now, identity))
        ordered: list[tuple[Memory, float, float]] = []
        for memory, score, fused in scored:
            if memory.num in moved:
                continue  # moved up behind its source
            ordered.append((memory, score, fused))
            bridged = []
            for num in children.get(memory.num, []):
                if num not in hydrated:
                    continue
                child, blob = hydrated[num]
                own = relevance(cosine(vector, blob), term_coverage(child.text, term_idf),
                                self.embedder.floor, ranking)  # fmt: skip
                bridged.append((child, bridges.bridged_score(score, own), 0.0))
            ordered += sorted((item for item in bridged if item[1] >= min_score), key=lambda item: -item[1])
        return ordered


def _split_cached(found: Candidates, now: float) -> tuple[Hydrated, list[int]]:
    """The ranked nums' cached rows that are still visible (unexpired), and the nums not cached."""
    cached: Hydrated = {}
    missing: list[int] = []
    for num in found.ranked:
        if num not in found.rows:
            missing.append(num)
            continue
        row = cast(tuple[Memory, bytes | None] | None, found.rows[num])
        if row is not None and (row[0].expires_at is None or row[0].expires_at > now):
            cached[num] = row
    return cached, missing
