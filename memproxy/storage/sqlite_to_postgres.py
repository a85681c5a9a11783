"""``memproxy migrate-to URL``: copy an SQLite data dir's database into an empty Postgres one.

Invariants:
- The source is the SQLite file of ``storage.data_dir`` (read in one snapshot transaction,
  so a running server may keep writing; what it writes after the snapshot is not copied:
  stop it first for a complete copy). The target gets the schema's migrations first.
- The target must hold no memories, messages or jobs: nothing is merged or overwritten.
- Everything is copied in ONE Postgres transaction: a failed copy leaves the target empty.
- Row numbers (``memories.num``, ``history.num``, ``messages.num``, ``changes.seq``) are
  kept, and the identity sequences moved past them, so ids, cursors and the change-log
  positions recorded in this data dir's index snapshots stay valid: a replica started on
  the same data dir with ``storage.url`` loads its snapshots instead of rebuilding.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from memproxy.storage.database import database_path, migrate
from memproxy.storage.postgres import migrate as pg_migrate

# (table, columns, identity column or None); jobs get their Postgres-only ``rowid`` anew, in order.
TABLES: list[tuple[str, str, str | None, str]] = [
    ("memories", "num, id, tenant, scope_key, user_id, agent_id, session_id, text, text_hash, source, "
     "metadata, created_at, updated_at, expires_at, embedding, embed_model", "num", "num"),
    ("history", "num, memory_id, tenant, scope_key, event, old_text, new_text, source, created_at, job_ids",
     "num", "num"),
    ("messages", "num, tenant, scope_key, user_id, agent_id, session_id, job_id, role, content, created_at",
     "num", "num"),
    ("jobs", "id, tenant, scope_key, user_id, agent_id, session_id, status, attempts, lease_owner, lease_until, "
     "next_attempt_at, last_error, prompt_tokens, completion_tokens, created_at, updated_at", None,
     "created_at, rowid"),
    ("changes", "seq, tenant, scope_key, memory_num, op", "seq", "seq"),
    ("meta", "key, value", None, "key"),
]  # fmt: skip
BATCH = 1000


class MigrateError(Exception):
    """The copy cannot be made (no source, target not empty); nothing was written."""


@dataclass
class MigrateResult:
    rows: dict[str, int]


def _open_source(data_dir: Path) -> sqlite3.Connection:
    path = database_path(data_dir)
    if not path.exists():
        raise MigrateError(f"no SQLite database at {path} (storage.data_dir)")
    conn = sqlite3.connect(str(path))
    migrate(conn)  # an older data dir gets the current schema first
    return conn


def _target_is_empty(target: psycopg.Connection[Any]) -> bool:
    for table in ("memories", "messages", "jobs"):
        if target.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone() is not None:
            return False
    return True


def migrate_to(data_dir: Path, url: str) -> MigrateResult:
    source = _open_source(data_dir)
    try:
        with psycopg.connect(url, autocommit=True) as target:
            pg_migrate(target)
            if not _target_is_empty(target):
                raise MigrateError("the target database already holds memories, messages or jobs")
            source.execute("BEGIN")  # one consistent snapshot of the source
            counts: dict[str, int] = {}
            with target.transaction():
                for table, columns, identity, order in TABLES:
                    counts[table] = _copy(source, target, table, columns, order)
                    if identity is not None:
                        target.execute(
                            f"SELECT setval(pg_get_serial_sequence('{table}', '{identity}'), "
                            f"(SELECT coalesce(max({identity}), 0) + 1 FROM {table}), false)"
                        )
            source.execute("COMMIT")
    finally:
        source.close()
    return MigrateResult(counts)


def _copy(source: sqlite3.Connection, target: psycopg.Connection[Any], table: str, columns: str,
          order: str) -> int:  # fmt: skip
    rows = source.execute(f"SELECT {columns} FROM {table} ORDER BY {order}")
    marks = ", ".join(["%s"] * len(columns.split(",")))
    overriding = " OVERRIDING SYSTEM VALUE" if table in ("memories", "history", "messages", "changes") else ""
    sql = f"INSERT INTO {table} ({columns}){overriding} VALUES ({marks})"
    if table == "meta":  # a replica may have recorded its embedder already; the source's wins
        sql += " ON CONFLICT (key) DO UPDATE SET value = excluded.value"
    copied = 0
    with target.cursor() as cursor:
        while batch := rows.fetchmany(BATCH):
            cursor.executemany(sql, batch)
            copied += len(batch)
    return copied
