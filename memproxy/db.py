"""The SQLite database: the source of truth for memories, history, messages and jobs.

Invariants:
- One ``sqlite3.Connection`` per ``Database``, used only from its single worker thread
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
- Migrations are an ordered list of ``(name, sql)``; each is applied once, in its own
  transaction, and recorded in ``migrations``. Never edit an applied migration; append.
- Another process (the ``memproxy worker``) may open the same file; WAL lets readers and
  one writer proceed together and ``busy_timeout`` absorbs writer contention.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

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


MIGRATIONS: list[tuple[str, str]] = [
    (
        "0001_initial",
        """
        CREATE TABLE memories (
            num INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT UNIQUE NOT NULL,
            tenant TEXT NOT NULL,
            scope_key TEXT NOT NULL,
            user_id TEXT NOT NULL DEFAULT '',
            agent_id TEXT NOT NULL DEFAULT '',
            session_id TEXT NOT NULL DEFAULT '',
            text TEXT NOT NULL,
            text_hash TEXT NOT NULL,
            source TEXT NOT NULL CHECK (source IN ('extracted', 'manual')),
            metadata TEXT NOT NULL DEFAULT '{}',
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            expires_at REAL,
            embedding BLOB,
            embed_model TEXT,
            UNIQUE (scope_key, text_hash)
        );
        CREATE INDEX memories_tenant_scope ON memories (tenant, scope_key, num);
        CREATE INDEX memories_tenant_user_agent ON memories (tenant, user_id, agent_id, num);
        CREATE INDEX memories_embed_model ON memories (embed_model);

        CREATE TABLE history (
            num INTEGER PRIMARY KEY,
            memory_id TEXT NOT NULL,
            tenant TEXT NOT NULL,
            scope_key TEXT NOT NULL,
            event TEXT NOT NULL CHECK (event IN ('ADD', 'UPDATE', 'DELETE')),
            old_text TEXT,
            new_text TEXT,
            source TEXT NOT NULL,
            created_at REAL NOT NULL
        );
        CREATE INDEX history_memory ON history (memory_id, num);
        CREATE INDEX history_scope ON history (scope_key);

        CREATE TABLE messages (
            num INTEGER PRIMARY KEY,
            tenant TEXT NOT NULL,
            scope_key TEXT NOT NULL,
            user_id TEXT NOT NULL DEFAULT '',
            agent_id TEXT NOT NULL DEFAULT '',
            session_id TEXT NOT NULL DEFAULT '',
            job_id TEXT,
            role TEXT NOT NULL,
            content TEXT NOT NULL,
            created_at REAL NOT NULL
        );
        CREATE INDEX messages_scope_session ON messages (scope_key, session_id, num);
        CREATE INDEX messages_job ON messages (job_id);

        CREATE TABLE jobs (
            id TEXT PRIMARY KEY,
            tenant TEXT NOT NULL,
            scope_key TEXT NOT NULL,
            user_id TEXT NOT NULL DEFAULT '',
            agent_id TEXT NOT NULL DEFAULT '',
            session_id TEXT NOT NULL DEFAULT '',
            status TEXT NOT NULL CHECK (status IN ('pending', 'running', 'done', 'dead')),
            attempts INTEGER NOT NULL DEFAULT 0,
            lease_owner TEXT,
            lease_until REAL,
            next_attempt_at REAL NOT NULL DEFAULT 0,
            last_error TEXT,
            prompt_tokens INTEGER NOT NULL DEFAULT 0,
            completion_tokens INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL
        );
        CREATE INDEX jobs_status_next ON jobs (status, next_attempt_at);
        CREATE INDEX jobs_scope ON jobs (scope_key);
        CREATE INDEX jobs_tenant_status ON jobs (tenant, status, created_at);

        CREATE TABLE changes (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            tenant TEXT NOT NULL,
            scope_key TEXT NOT NULL,
            memory_num INTEGER NOT NULL,
            op TEXT NOT NULL CHECK (op IN ('upsert', 'delete'))
        );
        CREATE INDEX changes_scope_seq ON changes (tenant, scope_key, seq);

        CREATE TABLE meta (
            key TEXT PRIMARY KEY,
            value TEXT NOT NULL
        );
        """,
    ),
    (
        # For the console (issue 15). history.job_ids: the captured turns (jobs) an extracted
        # change came from -- a batch coalesces several jobs, so a JSON array; NULL for manual
        # writes. The jobs index lets GET /v1/scopes page a tenant's scopes in key order.
        "0002_console",
        """
        ALTER TABLE history ADD COLUMN job_ids TEXT;
        CREATE INDEX jobs_tenant_user_agent ON jobs (tenant, user_id, agent_id)
        """,
    ),
    (
        # GET /v1/scopes counts each listed scope's jobs by status and its expired memories:
        # without these the planner walks every job of the tenant once per listed scope, and
        # every memory row of a big scope to read its expiry.
        "0003_scope_counts",
        """
        CREATE INDEX jobs_tenant_scope_status ON jobs (tenant, scope_key, status, updated_at);
        CREATE INDEX memories_scope_expiry ON memories (tenant, scope_key, expires_at)
        """,
    ),
]


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
                for statement in _statements(sql):
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


def _statements(sql: str) -> list[str]:
    # executescript() would COMMIT our transaction; split instead (no ';' inside our SQL).
    return [s.strip() for s in sql.split(";") if s.strip()]


class Database:
    """An SQLite file plus the one thread allowed to touch its connection."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None

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
            self._conn = await loop.run_in_executor(self._executor, _connect, self.path)
            await loop.run_in_executor(self._executor, migrate, self._conn)
        except BaseException:
            await self._shutdown()
            raise

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` on the database thread; ``fn`` owns its transaction."""
        conn, executor = self._conn, self._executor
        if conn is None or executor is None:
            raise RuntimeError("database is not open")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(executor, fn, conn)

    async def checkpoint(self) -> None:
        """Copy the WAL into the database and truncate it to zero bytes."""
        await self.run(lambda conn: conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone())

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
            await loop.run_in_executor(executor, conn.close)
        executor.shutdown(wait=True)
