"""The database: the source of truth for memories, history, messages, jobs and the change log.

``Database`` is what the rest of memproxy sees; ``open_database`` picks the engine: the
embedded SQLite file (``SqliteDatabase``, the default) or Postgres when ``storage.url`` is
set (``memproxy.storage.postgres``). Row functions receive an ``engine.Connection`` either way.

SQLite invariants:
- One ``sqlite3.Connection`` per ``SqliteDatabase``, used only from its single worker thread
  (``ThreadPoolExecutor(max_workers=1)``), so calls are serialized and never block the
  event loop. Callers pass a function; it owns its ``with conn:`` transaction.
- WAL journal with ``synchronous=NORMAL``: a committed transaction is in the WAL file
  before ``COMMIT`` returns, so it survives a kill -9 of the process (NORMAL only risks
  the last transactions on an OS crash / power loss, which FULL would also cover at the
  price of an fsync per commit; the index is rebuildable, memories are what matter and
  the process-crash guarantee is the one the contract tests).
- ``secure_delete=ON``: deleted rows are overwritten with zeros, so "forget" erases text
  rather than leaving it in free pages; a ``wal_checkpoint(TRUNCATE)`` after it empties
  the WAL too.
- Migrations (``memproxy.storage.migrations``) are applied once each, in a ``BEGIN IMMEDIATE``
  transaction, and recorded in ``migrations``.
- Another process (the ``memproxy worker``) may open the same file; WAL lets readers and
  one writer proceed together and ``busy_timeout`` absorbs writer contention.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol, TypeVar

from memproxy.config import StorageSettings
from memproxy.storage.engine import Connection, Engine, SqliteConnection
from memproxy.storage.migrations import MIGRATIONS, statements

log = logging.getLogger(__name__)

T = TypeVar("T")

BUSY_TIMEOUT_MS = 5000
DB_FILENAME = "memproxy.sqlite3"
# ``changes.memory_num`` of the marker "this scope was forgotten: rebuild it" (real nums
# start at 1 because ``memories.num`` is AUTOINCREMENT and never reused). Part of the
# change-log format that the memory rows write and the index replays.
RESET_MARKER_NUM = 0


def database_path(data_dir: Path) -> Path:
    """Where a data dir keeps its database: the one file that is the source of truth."""
    return Path(data_dir) / DB_FILENAME


def _connect(path: Path) -> sqlite3.Connection:
    # Default (legacy) transaction handling: DML opens a transaction implicitly and
    # ``with conn:`` commits or rolls it back, which is what callers rely on.
    conn = sqlite3.connect(str(path), check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000)
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA secure_delete=ON")
    return conn


def migrate(conn: sqlite3.Connection, migrations: list[tuple[str, str]] = MIGRATIONS) -> list[str]:
    """Apply the migrations not yet recorded; return the names applied now.

    Each migration runs in one ``BEGIN IMMEDIATE`` transaction so two processes
    starting together cannot both apply it.
    """
    conn.execute("CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
    conn.commit()
    applied: list[str] = []
    for name, sql in migrations:
        conn.execute("BEGIN IMMEDIATE")
        try:
            done = conn.execute("SELECT 1 FROM migrations WHERE name = ?", (name,)).fetchone()
            if done is None:
                for statement in statements(sql):
                    conn.execute(statement)
                conn.execute("INSERT INTO migrations (name, applied_at) VALUES (?, ?)", (name, time.time()))
                applied.append(name)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    if applied:
        log.info("applied migrations: %s", ", ".join(applied))
    return applied


class Database(Protocol):
    """What stores, the outbox and the index need from either engine."""

    engine: Engine

    @property
    def is_open(self) -> bool: ...

    async def open(self) -> None: ...

    def run(self, fn: Callable[[Connection], T]) -> Awaitable[T]:
        """Run ``fn(conn)`` off the event loop; ``fn`` owns its transaction (``with conn:``).

        The call is queued when ``run`` returns, before it is awaited: a caller can start a
        read, do other work on the loop meanwhile, then await it."""
        ...

    async def checkpoint(self) -> None:
        """Make deleted rows unrecoverable from the database files (after a forget)."""
        ...

    async def listen(self, channel: str, callback: Callable[[], None]) -> None:
        """Call ``callback`` when another process enqueues a job (returns at once if the
        engine cannot tell)."""
        ...

    async def close(self) -> None: ...


class SqliteDatabase:
    """An SQLite file plus the one thread allowed to touch its connection."""

    engine: Engine = "sqlite"

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._executor: ThreadPoolExecutor | None = None
        self._conn: SqliteConnection | None = None

    @property
    def is_open(self) -> bool:
        return self._conn is not None

    async def open(self) -> None:
        if self._conn is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memproxy-db")
        loop = asyncio.get_running_loop()
        try:
            raw = await loop.run_in_executor(self._executor, _connect, self.path)
            self._conn = SqliteConnection(raw)
            await loop.run_in_executor(self._executor, migrate, raw)
        except BaseException:
            await self._shutdown()
            raise

    def run(self, fn: Callable[[SqliteConnection], T]) -> Awaitable[T]:
        """Queue ``fn(conn)`` on the database thread; ``fn`` owns its transaction."""
        conn, executor = self._conn, self._executor
        if conn is None or executor is None:
            raise RuntimeError("database is not open")
        return asyncio.get_running_loop().run_in_executor(executor, fn, conn)

    async def checkpoint(self) -> None:
        """Copy the WAL into the database and truncate it to zero bytes."""
        await self.run(lambda conn: conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone())

    async def listen(self, channel: str, callback: Callable[[], None]) -> None:
        return None  # other processes on this file are found by polling

    async def close(self) -> None:
        if self._conn is None:
            return
        try:
            await self.checkpoint()
        except sqlite3.Error as exc:  # another process may hold the WAL; not fatal
            log.warning("checkpoint at close failed: %s", exc)
        await self._shutdown()

    async def _shutdown(self) -> None:
        conn, executor = self._conn, self._executor
        self._conn, self._executor = None, None
        if executor is None:
            return
        if conn is not None:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(executor, conn.raw.close)
        executor.shutdown(wait=True)


def open_database(storage: StorageSettings) -> Database:
    """The configured engine (not opened yet): Postgres when ``storage.url`` is set."""
    if storage.url:
        from memproxy.storage.postgres import PostgresDatabase

        return PostgresDatabase(storage.url, pool_size=storage.pool_size)
    return SqliteDatabase(database_path(storage.data_dir))
