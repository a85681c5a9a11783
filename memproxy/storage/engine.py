"""The one place where SQLite and Postgres differ, seen from the row functions.

Row functions (``memory.rows``, ``outbox.queue``, the index's change-log reads) are written
once, against ``Connection``: SQLite's ``?`` / ``:name`` placeholders, ``with conn:`` for a
transaction, ``RETURNING`` and ``ON CONFLICT`` (both engines have them). The adapters here
translate what differs:

- placeholders: Postgres gets ``%s`` / ``%(name)s`` (translated once per SQL text, cached);
- errors: a UNIQUE/CHECK violation is ``IntegrityError`` on both engines;
- a statement that may fail inside a larger transaction runs in ``savepoint()``: Postgres
  aborts the whole transaction on an error, SQLite only the statement;
- claims: ``exclusive()`` is SQLite's ``BEGIN IMMEDIATE`` (one writer at a time) and a
  plain transaction on Postgres, where ``skip_locked`` + ``try_lock`` (a transaction-level
  advisory lock) keep concurrent claimers apart without serializing them;
- ``notify``: Postgres ``NOTIFY`` (delivered at commit) wakes workers on other machines;
  SQLite has no other machine to wake;
- ``read_snapshot()``: one consistent read (SQLite ``BEGIN``; Postgres REPEATABLE READ).

Identity columns and column types differ only in DDL: see ``memproxy.storage.migrations``.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from functools import lru_cache
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    import psycopg

Engine = Literal["sqlite", "postgres"]
Params = Sequence[Any] | Mapping[str, Any]

# Jobs enqueued with this channel name wake LISTENing workers (Postgres only).
JOBS_CHANNEL = "memproxy_jobs"


class IntegrityError(Exception):
    """A constraint (UNIQUE, CHECK, NOT NULL) refused a write, on either engine."""


class DatabaseUnavailable(Exception):
    """The database server cannot be reached (Postgres down, restarting, failing over)."""


class Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Connection(Protocol):
    engine: Engine
    skip_locked: str

    def execute(self, sql: str, params: Params = ()) -> Cursor: ...

    def executemany(self, sql: str, seq: Iterable[Params]) -> None: ...

    def __enter__(self) -> Connection: ...

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...

    def savepoint(self) -> AbstractContextManager[None]: ...

    def exclusive(self) -> AbstractContextManager[None]: ...

    def read_snapshot(self) -> AbstractContextManager[None]: ...

    def try_lock(self, key: str) -> bool: ...

    def notify(self, channel: str) -> None: ...


class SqliteConnection:
    """``sqlite3.Connection`` in its default (legacy) transaction mode, behind ``Connection``."""

    engine: Engine = "sqlite"
    skip_locked = ""

    def __init__(self, raw: sqlite3.Connection) -> None:
        self.raw = raw

    def execute(self, sql: str, params: Params = ()) -> Cursor:
        try:
            return self.raw.execute(sql, params)
        except sqlite3.IntegrityError as exc:
            raise IntegrityError(str(exc)) from exc

    def executemany(self, sql: str, seq: Iterable[Params]) -> None:
        try:
            self.raw.executemany(sql, seq)
        except sqlite3.IntegrityError as exc:
            raise IntegrityError(str(exc)) from exc

    def __enter__(self) -> SqliteConnection:
        self.raw.__enter__()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.raw.__exit__(kind, exc, tb)

    def savepoint(self) -> AbstractContextManager[None]:
        return nullcontext()  # a failed statement is rolled back alone

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        self.raw.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.raw.execute("ROLLBACK")
            raise
        self.raw.execute("COMMIT")

    @contextmanager
    def read_snapshot(self) -> Iterator[None]:
        self.raw.execute("BEGIN")
        try:
            yield
        finally:
            self.raw.execute("COMMIT")

    def try_lock(self, key: str) -> bool:
        return True  # inside ``exclusive()`` this process already is the only writer

    def notify(self, channel: str) -> None:
        return None


_LITERAL_OR_MARK = re.compile(r"'(?:[^']|'')*'|%|\?|(?<!:):([A-Za-z_]\w*)")


@lru_cache(maxsize=1024)
def to_pyformat(sql: str) -> str:
    """SQLite placeholders to psycopg's: ``?`` → ``%s``, ``:name`` → ``%(name)s``, ``%`` → ``%%``."""

    def swap(match: re.Match[str]) -> str:
        token = match.group(0)
        if token.startswith("'"):
            return token
        if token == "%":
            return "%%"
        if token == "?":
            return "%s"
        return f"%({match.group(1)})s"

    return _LITERAL_OR_MARK.sub(swap, sql)


class PostgresConnection:
    """A pooled psycopg connection (autocommit, so reads outside ``with conn:`` hold no
    transaction open) behind ``Connection``."""

    engine: Engine = "postgres"
    skip_locked = " FOR UPDATE SKIP LOCKED"

    def __init__(self, raw: psycopg.Connection[Any]) -> None:
        self.raw = raw
        self._transactions: list[AbstractContextManager[Any]] = []

    def execute(self, sql: str, params: Params = ()) -> Cursor:
        import psycopg

        try:
            return self.raw.execute(to_pyformat(sql), params)  # type: ignore[arg-type]
        except psycopg.IntegrityError as exc:
            raise IntegrityError(str(exc)) from exc

    def executemany(self, sql: str, seq: Iterable[Params]) -> None:
        import psycopg

        try:
            with self.raw.cursor() as cursor:
                cursor.executemany(to_pyformat(sql), seq)  # type: ignore[arg-type]
        except psycopg.IntegrityError as exc:
            raise IntegrityError(str(exc)) from exc

    def __enter__(self) -> PostgresConnection:
        transaction = self.raw.transaction()
        transaction.__enter__()
        self._transactions.append(transaction)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._transactions.pop().__exit__(kind, exc, tb)

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        with self.raw.transaction():  # nested in a transaction: a SAVEPOINT
            yield

    def exclusive(self) -> AbstractContextManager[None]:
        return self._plain()

    @contextmanager
    def _plain(self) -> Iterator[None]:
        with self.raw.transaction():
            yield

    @contextmanager
    def read_snapshot(self) -> Iterator[None]:
        with self.raw.transaction():
            self.raw.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield

    def try_lock(self, key: str) -> bool:
        row = self.raw.execute("SELECT pg_try_advisory_xact_lock(hashtextextended(%s, 0))", (key,)).fetchone()
        return bool(row and row[0])

    def notify(self, channel: str) -> None:
        self.raw.execute(f"NOTIFY {channel}")
