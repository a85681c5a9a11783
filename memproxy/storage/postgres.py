"""Postgres as the shared source of truth (``storage.url``), for several replicas and workers.

Why sync psycopg 3 + psycopg_pool in threads rather than an async driver: every row
function is a plain function over a ``Connection`` that owns one transaction, and SQLite
needs them to run in a thread anyway. Running the *same* functions on pooled psycopg
connections in a thread pool keeps one code path for both engines (``Database.run``), with
no async duplicate of each query. psycopg 3 is the maintained successor of psycopg2, has a
first-party pool, server-side prepared statements for repeated queries, and async
connections for the one thing that must wait on the socket: LISTEN (``listen``).

Invariants:
- Pool connections are in autocommit mode: a read outside ``with conn:`` is its own
  statement and leaves no transaction open; ``with conn:`` is one transaction.
- Migrations are applied under a transaction-level advisory lock, one transaction each,
  so replicas starting together apply each exactly once.
- A lost connection or an unreachable server raises ``DatabaseUnavailable`` and opens a
  circuit breaker: calls fail at once instead of each waiting for the pool's timeout, so
  chat (recall fails open, capture spools) stays fast while the database is down. Every
  ``BREAKER_S`` one call probes (waiting at most ``PROBE_TIMEOUT_S`` for a connection, which
  the pool keeps trying to open in the background); its success closes the breaker.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from memproxy.storage.engine import DatabaseUnavailable, Engine, PostgresConnection
from memproxy.storage.migrations import MIGRATIONS, for_postgres

log = logging.getLogger(__name__)

T = TypeVar("T")

CONNECT_TIMEOUT_S = 3
POOL_TIMEOUT_S = 3.0
BREAKER_S = 0.5
# While the breaker is open, one call at a time probes, waiting this long for a connection.
PROBE_TIMEOUT_S = 0.2
# Arbitrary, fixed: the advisory lock key every replica takes to migrate.
MIGRATION_LOCK = 0x6D656D70726F7879 & 0x7FFFFFFFFFFFFFFF


def migrate(raw: psycopg.Connection[Any]) -> list[str]:
    """Apply pending migrations, each in its own transaction under the migration lock."""
    applied: list[str] = []
    for name, sql in MIGRATIONS:
        with raw.transaction():
            raw.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            raw.execute(
                "CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)"
            )
            if raw.execute("SELECT 1 FROM migrations WHERE name = %s", (name,)).fetchone() is not None:
                continue
            for statement in for_postgres(name, sql):
                raw.execute(statement)
            raw.execute("INSERT INTO migrations (name, applied_at) VALUES (%s, %s)", (name, time.time()))
            applied.append(name)
    if applied:
        log.info("applied migrations: %s", ", ".join(applied))
    return applied


def check_reachable(url: str) -> None:
    """Connect once (start-up check); raises ``psycopg.Error`` with the server's reason."""
    with psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT_S, autocommit=True) as conn:
        conn.execute("SELECT 1")


class PostgresDatabase:
    engine: Engine = "postgres"

    def __init__(self, url: str, pool_size: int = 8) -> None:
        self.url = url
        self.pool_size = pool_size
        self._pool: ConnectionPool[psycopg.Connection[Any]] | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._broken_until = 0.0
        self._probing = False
        self.last_error: str | None = None

    @property
    def is_open(self) -> bool:
        return self._pool is not None

    @property
    def available(self) -> bool:
        """False while the last call found the server unreachable (and shortly after)."""
        return self.last_error is None

    async def open(self) -> None:
        if self._pool is not None:
            return
        executor = ThreadPoolExecutor(max_workers=self.pool_size, thread_name_prefix="memproxy-pg")
        pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            self.url, min_size=1, max_size=self.pool_size, open=False, timeout=POOL_TIMEOUT_S,
            kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S},
            check=ConnectionPool.check_connection, name="memproxy",
        )  # fmt: skip
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(executor, lambda: pool.open(wait=True, timeout=POOL_TIMEOUT_S * 3))
            await loop.run_in_executor(executor, self._migrate, pool)
        except BaseException:
            await loop.run_in_executor(executor, pool.close)
            executor.shutdown(wait=True)
            raise
        self._pool, self._executor = pool, executor

    @staticmethod
    def _migrate(pool: ConnectionPool[psycopg.Connection[Any]]) -> None:
        with pool.connection() as raw:
            migrate(raw)

    def _call(self, fn: Callable[[PostgresConnection], T], timeout: float) -> T:
        pool = self._pool
        if pool is None:
            raise RuntimeError("database is not open")
        try:
            with pool.connection(timeout=timeout) as raw:
                try:
                    return fn(PostgresConnection(raw))
                except psycopg.OperationalError as exc:
                    if raw.broken or raw.closed:
                        raise DatabaseUnavailable(str(exc)) from exc
                    raise
        except PoolTimeout as exc:
            raise DatabaseUnavailable(f"no database connection within {timeout:g}s") from exc

    def run(self, fn: Callable[[PostgresConnection], T]) -> Awaitable[T]:
        """Queue ``fn`` on a pooled connection now; the returned awaitable must be awaited
        (it settles the circuit breaker)."""
        executor = self._executor
        if executor is None:
            raise RuntimeError("database is not open")
        timeout, probe = POOL_TIMEOUT_S, False
        if self.last_error is not None:  # breaker open: fail fast, but let one call probe
            if time.monotonic() < self._broken_until or self._probing:
                raise DatabaseUnavailable(self.last_error)
            self._probing = probe = True
            timeout = PROBE_TIMEOUT_S
        future = asyncio.get_running_loop().run_in_executor(executor, self._call, fn, timeout)
        return self._settle(future, probe)

    async def _settle(self, future: Awaitable[T], probe: bool) -> T:
        try:
            result = await future
        except DatabaseUnavailable as exc:
            if self.last_error is None:
                log.warning("database unavailable: %s", exc)
            self.last_error = str(exc) or "database unavailable"
            self._broken_until = time.monotonic() + BREAKER_S
            raise
        finally:
            if probe:
                self._probing = False
        if self.last_error is not None:
            log.info("database reachable again")
            self.last_error = None
        return result

    async def checkpoint(self) -> None:
        """VACUUM the tables a forget deletes from, so dead row versions are reclaimed."""
        await self.run(lambda c: c.execute("VACUUM memories, history, messages, jobs, changes"))

    async def listen(self, channel: str, callback: Callable[[], None]) -> None:
        """Call ``callback`` for each NOTIFY on ``channel`` (and after each (re)connect, for
        what was sent meanwhile). Reconnects while the server is away; runs until cancelled."""
        while True:
            try:
                aconn = await psycopg.AsyncConnection.connect(
                    self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
                )
                async with aconn:
                    await aconn.execute(f"LISTEN {channel}")
                    callback()
                    async for _ in aconn.notifies():
                        callback()
            except psycopg.OperationalError as exc:
                log.debug("LISTEN %s connection lost (%s); polling meanwhile", channel, exc)
            await asyncio.sleep(1.0)

    async def close(self) -> None:
        pool, executor = self._pool, self._executor
        self._pool, self._executor = None, None
        if pool is None or executor is None:
            return
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(executor, pool.close)
        executor.shutdown(wait=True)
