"""The schema: numbered migrations, written once in SQLite's dialect, translated for Postgres.

Invariants:
- ``MIGRATIONS`` is an ordered list of ``(name, sql)``; each is applied once, in its own
  transaction, and recorded in the ``migrations`` table. Never edit an applied one; append.
- The SQL uses only types and constraints both engines accept after ``for_postgres``:
  SQLite's rowid aliases become identity columns, ``REAL``/``BLOB``/``INTEGER`` become
  ``DOUBLE PRECISION``/``BYTEA``/``BIGINT``. ``POSTGRES_EXTRA`` adds what SQLite has
  implicitly (``jobs.rowid``, which orders jobs enqueued at the same instant).
- No ``;`` inside a statement: statements are split on it.
"""

from __future__ import annotations

import re

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
    (
        "0004_changes_resets",
        # Replicas look for scopes forgotten elsewhere every second (IndexManager.drop_forgotten).
        "CREATE INDEX changes_resets ON changes (seq) WHERE memory_num = 0",
    ),
    (
        # What an extraction did, per job: operations applied, operations refused by a
        # guard (with the reason), and whether a fact-stating turn got an empty answer.
        "0005_job_report",
        "ALTER TABLE jobs ADD COLUMN report TEXT",
    ),
]


# Statements appended to a migration on Postgres only.
POSTGRES_EXTRA: dict[str, list[str]] = {
    "0001_initial": ["ALTER TABLE jobs ADD COLUMN rowid BIGINT GENERATED ALWAYS AS IDENTITY"],
}

_TYPES = [
    (
        re.compile(r"\bINTEGER PRIMARY KEY( AUTOINCREMENT)?"),
        "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY",
    ),
    (re.compile(r"\bREAL\b"), "DOUBLE PRECISION"),
    (re.compile(r"\bBLOB\b"), "BYTEA"),
    (re.compile(r"\bINTEGER\b"), "BIGINT"),
]


def statements(sql: str) -> list[str]:
    return [s.strip() for s in sql.split(";") if s.strip()]


def for_postgres(name: str, sql: str) -> list[str]:
    """One migration's statements in Postgres's dialect."""
    translated = []
    for statement in statements(sql):
        for pattern, replacement in _TYPES:
            statement = pattern.sub(replacement, statement)
        translated.append(statement)
    return translated + POSTGRES_EXTRA.get(name, [])
