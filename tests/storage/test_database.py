"""The SQLite wrapper: pragmas, migrations, the single database thread."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from memproxy.storage.database import SqliteDatabase as Database
from memproxy.storage.database import migrate
from memproxy.storage.engine import Connection
from memproxy.storage.migrations import MIGRATIONS


async def _pragma(db: Database, name: str) -> object:
    return await db.run(lambda c: c.execute(f"PRAGMA {name}").fetchone()[0])


def test_open_sets_durable_private_pragmas(tmp_path: Path) -> None:
    async def body() -> None:
        db = Database(tmp_path / "sub" / "m.sqlite3")
        await db.open()
        assert await _pragma(db, "journal_mode") == "wal"
        assert await _pragma(db, "secure_delete") == 1
        assert await _pragma(db, "foreign_keys") == 1
        assert await _pragma(db, "synchronous") == 1  # NORMAL
        assert await _pragma(db, "busy_timeout") == 5000
        await db.close()

    asyncio.run(body())


def test_migrations_are_recorded_once(tmp_path: Path) -> None:
    async def body() -> None:
        path = tmp_path / "m.sqlite3"
        for _ in range(2):
            db = Database(path)
            await db.open()
            names = await db.run(
                lambda c: [r[0] for r in c.execute("SELECT name FROM migrations").fetchall()]
            )
            assert names == [name for name, _ in MIGRATIONS]
            tables = await db.run(
                lambda c: {
                    r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
                }
            )
            assert {"memories", "history", "messages", "jobs", "changes", "meta"} <= tables
            assert await db.run(lambda c: migrate(c.raw)) == []  # nothing left to apply
            await db.close()

    asyncio.run(body())


def test_failed_migration_is_rolled_back(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "m.sqlite3")
    broken = [("0001_ok", "CREATE TABLE a (x INTEGER)"), ("0002_bad", "CREATE TABLE b (y); NOT SQL")]
    with pytest.raises(sqlite3.OperationalError):
        migrate(conn, broken)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "a" in tables and "b" not in tables
    assert [r[0] for r in conn.execute("SELECT name FROM migrations")] == ["0001_ok"]


def test_all_calls_run_on_one_dedicated_thread(tmp_path: Path) -> None:
    async def body() -> None:
        db = Database(tmp_path / "m.sqlite3")
        await db.open()
        idents = await asyncio.gather(*(db.run(lambda _c: threading.get_ident()) for _ in range(20)))
        assert len(set(idents)) == 1 and idents[0] != threading.get_ident()
        await db.close()
        with pytest.raises(RuntimeError):
            await db.run(lambda c: c.execute("SELECT 1"))

    asyncio.run(body())


def test_close_truncates_the_wal(tmp_path: Path) -> None:
    async def body() -> None:
        db = Database(tmp_path / "m.sqlite3")
        await db.open()

        def write(conn: Connection) -> None:
            with conn:
                conn.execute("INSERT INTO meta (key, value) VALUES ('k', 'v')")

        await db.run(write)
        await db.close()
        wal = tmp_path / "m.sqlite3-wal"
        assert not wal.exists() or wal.stat().st_size == 0

    asyncio.run(body())
