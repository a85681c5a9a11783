"""The async memory store the HTTP API, recall and tools use.

Invariants:
- Each operation embeds first (off the database thread), then does one ``db.run`` whose
  function owns a single transaction; so the database commits before the index hears of it,
  and the index learns of it from the change log on its next search.
- A memory of another tenant, a missing one and an expired one are the same answer:
  ``not_found()`` (404).
- The embedder identity in ``meta`` is the current one; rows embedded by another are
  re-embedded by ``reembed_stale`` and meanwhile only found lexically.
- Every text it stores passes ``guards.check_text`` (no secrets, at most
  ``memory.max_chars``), whatever the write path; a refusal is reported to ``on_refused``.
- Forgetting a scope deletes its rows, its index and snapshot files, then checkpoints
  (SQLite: WAL TRUNCATE, so no copy survives in the ``-wal`` file; Postgres: VACUUM).
  Other replicas learn of it from the change log's reset marker.

The sync, composable row functions live in ``memproxy.memory.rows`` (re-exported here);
search in ``memproxy.memory.search``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt

from memproxy.config import Settings
from memproxy.errors import ApiError, not_found
from memproxy.index.embedder import Embedder, make_embedder
from memproxy.index.manager import IndexManager
from memproxy.index.scoring import (
    Ranking,
    default_ranking,
)
from memproxy.memory import rows
from memproxy.memory.guards import MemoryRefused, RefusalHook, check_text
from memproxy.memory.rows import UNSET, DuplicateMemory, Memory
from memproxy.memory.search import HybridSearch
from memproxy.memory.transfer import ImportRefused, LineProblem
from memproxy.scope import Scope
from memproxy.storage.database import Database, open_database
from memproxy.storage.engine import Connection
from memproxy.wire.times import parse_time

__all__ = ["UNSET", "DuplicateMemory", "Memory", "MemoryStore", "build_store", "open_store", "parse_time"]

log = logging.getLogger(__name__)

MAX_TEXT_CHARS = 16_000
# Texts an import embeds per call when it reports progress (a 2,000-line file: 32 updates).
_IMPORT_BATCH = 64


def _check_text(text: object) -> str:
    if not isinstance(text, str) or not text.strip():
        raise ApiError(400, "text must be a non-empty string", param="text")
    if len(text) > MAX_TEXT_CHARS:
        raise ApiError(400, f"text must be at most {MAX_TEXT_CHARS} characters", param="text")
    return text.strip()


def _check_metadata(metadata: object) -> dict[str, Any] | None:
    if metadata is not None and not isinstance(metadata, dict):
        raise ApiError(400, "metadata must be a JSON object", param="metadata")
    return metadata


def _set_meta(conn: Connection, values: dict[str, str]) -> dict[str, str]:
    """Store ``values`` in ``meta``; return what was there before."""
    with conn:
        before = {k: v for k, v in conn.execute("SELECT key, value FROM meta").fetchall()}
        conn.executemany(
            "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            list(values.items()),
        )
    return before


class MemoryStore:
    def __init__(
        self,
        db: Database,
        embedder: Embedder,
        index: IndexManager,
        clock: Callable[[], float] = time.time,
        *,
        max_chars: int = 300,
    ) -> None:
        self.db = db
        self.embedder = embedder
        self.index = index
        self.clock = clock
        # How search gates and scores candidates (bench/retrieval_quality.py compares others).
        self.ranking: Ranking = default_ranking(embedder.identity)
        # Reads ``self.clock`` at each search, so a clock set later (tests) is the one used.
        self.searcher = HybridSearch(db, embedder, index, lambda: self.clock())
        self.max_chars = max_chars
        # Told (reason, source) of every refused text; wired to metrics by ``services``.
        self.on_refused: RefusalHook | None = None

    def guard(self, text: str, source: str) -> None:
        """``guards.check_text`` with the refusal counted (raises ``MemoryRefused``)."""
        try:
            check_text(text, self.max_chars)
        except MemoryRefused as exc:
            if self.on_refused is not None:
                self.on_refused(exc.reason, source)
            raise

    async def start(self) -> int:
        """Record the embedder identity; return how many memories need re-embedding."""
        meta = {"embedder.identity": self.embedder.identity}
        if self.embedder.dim:
            meta["embedder.dim"] = str(self.embedder.dim)
        before = await self.db.run(lambda c: _set_meta(c, meta))
        previous = before.get("embedder.identity")
        stale = await self.stale_count()
        if previous and previous != self.embedder.identity:
            log.info("embedder changed from %s to %s; %d memories to re-embedding",
                     previous, self.embedder.identity, stale)  # fmt: skip
        return stale

    async def _embed_one(self, text: str, *, query: bool = False) -> npt.NDArray[np.float32]:
        vectors = await self.embedder.embed([text], query=query)
        return np.asarray(vectors[0], dtype=np.float32)

    async def add(
        self,
        scope: Scope,
        text: str,
        *,
        session_id: str = "",
        metadata: dict[str, Any] | None = None,
        expires_at: float | None = None,
        source: str = "manual",
    ) -> Memory:
        """Store one memory; raises ``DuplicateMemory`` (409) for an identical text."""
        text = _check_text(text)
        self.guard(text, source)
        metadata = _check_metadata(metadata)
        vector = await self._embed_one(text)
        identity, now = self.embedder.identity, self.clock()

        def write(conn: Connection) -> Memory:
            with conn:
                return rows.insert_memory(
                    conn, scope, text, embedding=vector, embed_model=identity, source=source, now=now,
                    session_id=session_id, metadata=metadata, expires_at=expires_at,
                )  # fmt: skip

        return await self.db.run(write)

    async def get(self, tenant: str, memory_id: str) -> Memory:
        now = self.clock()
        memory = await self.db.run(lambda c: rows.get_memory(c, tenant, memory_id, now))
        if memory is None:
            raise not_found()
        return memory

    async def list_memories(
        self,
        tenant: str,
        user_id: str | None,
        agent_id: str | None,
        *,
        limit: int = 50,
        cursor: str | None = None,
        source: str | None = None,
        has_expiry: bool | None = None,
    ) -> tuple[list[Memory], str | None]:
        now, limit = self.clock(), max(1, min(limit, 1000))
        return await self.db.run(
            lambda c: rows.list_memories(c, tenant, user_id, agent_id, limit=limit, cursor=cursor, now=now,
                                         source=source, has_expiry=has_expiry)
        )  # fmt: skip

    async def update(
        self,
        tenant: str,
        memory_id: str,
        *,
        text: str | None = None,
        metadata: dict[str, Any] | None = None,
        expires_at: float | None = UNSET,
        source: str = "manual",
    ) -> Memory:
        """PATCH: a new text is re-embedded; history records old and new text."""
        text = None if text is None else _check_text(text)
        if text is not None:
            self.guard(text, source)
        metadata = _check_metadata(metadata)
        vector = None if text is None else await self._embed_one(text)
        identity, now = self.embedder.identity, self.clock()

        def write(conn: Connection) -> Memory | None:
            with conn:
                return rows.update_memory(
                    conn, tenant, memory_id, source=source, now=now, text=text, embedding=vector,
                    embed_model=identity if text is not None else None, metadata=metadata,
                    expires_at=expires_at,
                )  # fmt: skip

        memory = await self.db.run(write)
        if memory is None:
            raise not_found()
        return memory

    async def delete(self, tenant: str, memory_id: str, *, source: str = "manual") -> None:
        now = self.clock()

        def write(conn: Connection) -> bool:
            with conn:
                if rows.get_memory(conn, tenant, memory_id, now) is None:
                    return False  # expired counts as gone for the API too
                return rows.delete_memory(conn, tenant, memory_id, source=source, now=now)

        if not await self.db.run(write):
            raise not_found()

    async def history(self, tenant: str, memory_id: str) -> list[dict[str, Any]]:
        events = await self.db.run(lambda c: rows.get_history(c, tenant, memory_id))
        if events is None:
            raise not_found()
        return events

    async def forget_scope(self, scope: Scope) -> dict[str, int]:
        """Erase a scope for real: rows, index, snapshots, and the WAL copy of them."""

        def write(conn: Connection) -> dict[str, int]:
            with conn:
                return rows.forget_scope(conn, scope)

        counts = await self.db.run(write)
        counts["index_entries"] = await self.index.drop_scope(scope)
        await self.db.checkpoint()
        return counts

    async def export(self, tenant: str, user_id: str | None, agent_id: str | None) -> list[dict[str, Any]]:
        now = self.clock()
        return await self.db.run(lambda c: rows.export_rows(c, tenant, user_id, agent_id, now))

    async def import_(
        self,
        tenant: str,
        items: list[dict[str, Any]],
        progress: Callable[[int], None] | None = None,
        bad_lines: Sequence[LineProblem] = (),
    ) -> dict[str, int]:
        """Import exported dicts (re-embedded with the current embedder), all or nothing.

        Every item is checked first; any refused, or any of ``bad_lines`` (lines the reader
        could not make an item of), raises ``ImportRefused`` listing each by its ``line``
        (the file line ``read_jsonl`` recorded; else its position). ``progress`` is called
        with the number of texts each embedding batch did.
        """
        problems = list(bad_lines)
        for n, item in enumerate(items, start=1):
            line = int(item.get("line", n)) if isinstance(item, dict) else n
            try:
                if not isinstance(item, dict):
                    raise ApiError(400, "not a JSON object")
                item["text"] = _check_text(item.get("text"))
                _check_metadata(item.get("metadata"))
                if item.get("source", "manual") not in rows.SOURCES:
                    raise ApiError(400, "source must be extracted or manual", param="source")
                self.guard(item["text"], str(item.get("source", "manual")))
            except ApiError as exc:  # MemoryRefused included
                problems.append((line, exc.message, None if exc.code is None else str(exc.code)))
        if problems:
            raise ImportRefused(problems)
        vectors = await self._embed_all([item["text"] for item in items], progress) if items else None
        identity, now = self.embedder.identity, self.clock()

        def write(conn: Connection) -> dict[str, int]:
            with conn:
                return rows.import_rows(conn, tenant, items, vectors, identity, now)

        return await self.db.run(write)

    async def _embed_all(
        self, texts: list[str], progress: Callable[[int], None] | None
    ) -> npt.NDArray[np.float32]:
        if progress is None:
            return await self.embedder.embed(texts)
        batches = []
        for start in range(0, len(texts), _IMPORT_BATCH):
            batches.append(await self.embedder.embed(texts[start : start + _IMPORT_BATCH]))
            progress(len(batches[-1]))
        return np.concatenate(batches)

    async def search(
        self,
        scope: Scope,
        query: str,
        top_k: int = 8,
        min_score: float = 0.0,
        *,
        query_vector: npt.NDArray[np.float32] | None = None,
        gate: bool = True,
    ) -> list[tuple[Memory, float]]:
        """Hybrid search (``memproxy.memory.search``): best first, scores in [0, 1].

        ``query_vector`` lets a caller that already embedded the query skip embedding.
        ``gate=False`` keeps candidates without evidence: context for the extractor, which
        must see what a turn could update even when the embedder cannot tell they relate.
        """
        ranking = self.ranking if gate else replace(self.ranking, gate=False)
        return await self.searcher.run(scope, query, top_k, min_score, ranking, query_vector)

    async def stale_count(self) -> int:
        identity = self.embedder.identity
        row = await self.db.run(
            lambda c: c.execute(
                "SELECT count(*) FROM memories WHERE embed_model IS NULL OR embed_model <> ? OR embedding IS NULL",
                (identity,),
            ).fetchone()
        )
        return int(row[0])

    async def reembed_stale(self, batch: int = 256) -> int:
        """Re-embed memories of another embedder identity, in batches; returns the count."""
        identity, done, after = self.embedder.identity, 0, 0
        total = await self.stale_count()
        while True:
            todo = await self.db.run(partial(_stale_batch, identity=identity, after=after, batch=batch))
            if not todo:
                break
            vectors = await self.embedder.embed([text for _, text in todo])
            done += await self.db.run(partial(_store_vectors, todo=todo, vectors=vectors, identity=identity))
            after = todo[-1][0]
            log.info("re-embedded %d/%d memories with %s", done, total, identity)
        return done


def _stale_batch(conn: Connection, identity: str, after: int, batch: int) -> list[tuple[int, str]]:
    found = conn.execute(
        "SELECT num, text FROM memories "
        "WHERE num > ? AND (embed_model IS NULL OR embed_model <> ? OR embedding IS NULL) "
        "ORDER BY num LIMIT ?",
        (after, identity, batch),
    ).fetchall()
    return [(int(r[0]), str(r[1])) for r in found]


def _store_vectors(
    conn: Connection, todo: list[tuple[int, str]], vectors: npt.NDArray[np.float32], identity: str
) -> int:
    """Save new vectors unless the text changed meanwhile; log a change for the index."""
    stored = 0
    with conn:
        for (num, text), vector in zip(todo, vectors, strict=True):
            row = conn.execute(
                "UPDATE memories SET embedding = ?, embed_model = ? WHERE num = ? AND text = ? "
                "RETURNING tenant, scope_key",
                (rows.vector_blob(vector), identity, num, text),
            ).fetchone()
            if row is not None:
                conn.execute(
                    "INSERT INTO changes (tenant, scope_key, memory_num, op) VALUES (?, ?, ?, 'upsert')",
                    (row[0], row[1], num),
                )
                stored += 1
    return stored


def build_store(db: Database, settings: Settings) -> MemoryStore:
    """The store as configured: the same embedder and index layout the server uses."""
    embedder = make_embedder(settings.embedding, settings.upstream)
    index = IndexManager(db, settings.storage.data_dir, embedder, settings.index)
    return MemoryStore(db, embedder, index, max_chars=settings.memory.max_chars)


@asynccontextmanager
async def open_store(settings: Settings) -> AsyncIterator[MemoryStore]:
    """Open a data dir's store outside the server (operator tools, benchmarks)."""
    db = open_database(settings.storage)
    await db.open()
    try:
        store = build_store(db, settings)
        await store.start()
        yield store
    finally:
        await db.close()
