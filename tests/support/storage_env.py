"""Shared setup for the storage tests: a real database (SQLite file or Postgres schema), real
FAISS, the hash embedder. ``Storage`` says which; the ``storage`` fixture gives both."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memproxy.config import IndexSettings
from memproxy.index.embedder import Embedder, HashEmbedder
from memproxy.index.manager import IndexManager
from memproxy.memory.store import MemoryStore
from memproxy.storage.database import Database, SqliteDatabase
from memproxy.storage.postgres import PostgresDatabase

DB_NAME = "memproxy.sqlite3"


@dataclass(frozen=True)
class Storage:
    """Where a test's store lives: ``data_dir`` always (snapshots; SQLite's file), ``url`` on Postgres."""

    data_dir: Path
    url: str | None = None

    @property
    def engine(self) -> str:
        return "postgres" if self.url else "sqlite"

    def database(self) -> Database:
        if self.url:
            return PostgresDatabase(self.url, pool_size=4)
        return SqliteDatabase(self.data_dir / DB_NAME)

    def section(self) -> dict[str, Any]:
        """The ``storage`` config section of a server on this storage."""
        return {"data_dir": str(self.data_dir), "url": self.url}


@asynccontextmanager
async def open_store(
    where: Path | Storage,
    *,
    embedder: Embedder | None = None,
    settings: IndexSettings | None = None,
    snapshot_on_close: bool = True,
) -> AsyncIterator[MemoryStore]:
    """A started store; closing snapshots dirty scopes unless simulating a crash."""
    storage = where if isinstance(where, Storage) else Storage(where)
    db = storage.database()
    await db.open()
    embedder = embedder or HashEmbedder(256)
    index = IndexManager(db, storage.data_dir, embedder, settings or IndexSettings())
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
