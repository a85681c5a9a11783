"""Shared setup for the storage tests: a real SQLite file, real FAISS, the hash embedder."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from memproxy.config import IndexSettings
from memproxy.db import Database
from memproxy.index.embedder import Embedder, HashEmbedder
from memproxy.index.manager import IndexManager
from memproxy.memory.store import MemoryStore

DB_NAME = "memproxy.sqlite3"


@asynccontextmanager
async def open_store(
    data_dir: Path,
    *,
    embedder: Embedder | None = None,
    settings: IndexSettings | None = None,
    snapshot_on_close: bool = True,
) -> AsyncIterator[MemoryStore]:
    """A started store; closing snapshots dirty scopes unless simulating a crash."""
    db = Database(data_dir / DB_NAME)
    await db.open()
    embedder = embedder or HashEmbedder(256)
    index = IndexManager(db, data_dir, embedder, settings or IndexSettings())
    store = MemoryStore(db, embedder, index)
    await store.start()
    try:
        yield store
    finally:
        if snapshot_on_close:
            await index.snapshot_dirty()
        await db.close()


def all_bytes(root: Path) -> dict[Path, bytes]:
    return {path: path.read_bytes() for path in root.rglob("*") if path.is_file()}
