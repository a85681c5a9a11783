"""Memory rows (SQLite or Postgres, see ``memproxy.storage.engine``): sync functions that callers compose inside one transaction.

Invariants:
- The database is the source of truth. Every write of a memory also writes its ``history`` event
  and a ``changes`` row in the same transaction; the index replays ``changes``.
- Every query filters by ``tenant``; a memory of another tenant is indistinguishable from
  a missing one (``None``).
- Exact duplicates within a scope are impossible: ``UNIQUE(scope_key, text_hash)`` over the
  normalized text (casefold, collapsed whitespace, trailing ``.!?`` stripped).
- Expired memories (``expires_at <= now``) are invisible to every reader here.
- History of a deleted memory is kept (it is the audit trail) until its scope is
  forgotten; forgetting deletes rows for real (with ``secure_delete``), not a soft flag.
- The sync functions never commit: callers wrap them in ``with conn:``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from memproxy.errors import ApiError
from memproxy.scope import Scope
from memproxy.storage.database import RESET_MARKER_NUM
from memproxy.storage.engine import Connection, IntegrityError
from memproxy.wire.times import iso, parse_time

SOURCES = ("extracted", "manual")
_SPACES = re.compile(r"\s+")
_COLUMNS = (
    "num, id, tenant, scope_key, user_id, agent_id, session_id, text, source, metadata, "
    "created_at, updated_at, expires_at"
)
_VISIBLE = "(expires_at IS NULL OR expires_at > ?)"


class DuplicateMemory(ApiError):
    """The scope already holds a memory with the same normalized text (a 409 if unhandled)."""

    def __init__(self, existing_id: str) -> None:
        super().__init__(409, "An identical memory already exists in this scope", code="duplicate_memory")
        self.existing_id = existing_id


class _Unset:
    """Marker for "argument not given" where ``None`` is a meaningful value."""


UNSET: Any = _Unset()


def normalize_text(text: str) -> str:
    return _SPACES.sub(" ", text.casefold()).strip().rstrip(".!?").strip()


def text_hash(text: str) -> str:
    return hashlib.sha256(normalize_text(text).encode()).hexdigest()


def vector_blob(vector: npt.NDArray[np.float32] | None) -> bytes | None:
    return None if vector is None else np.ascontiguousarray(vector, dtype=np.float32).tobytes()


@dataclass(frozen=True, slots=True)
class Memory:
    num: int
    id: str
    tenant: str
    scope_key: str
    user_id: str
    agent_id: str
    session_id: str
    text: str
    source: str
    metadata: dict[str, Any]
    created_at: float
    updated_at: float
    expires_at: float | None

    @property
    def scope(self) -> Scope:
        return Scope(self.tenant, self.user_id, self.agent_id)

    def to_api(self) -> dict[str, Any]:
        """The contract's memory object (timestamps as ISO-8601 UTC with ``Z``)."""
        return {
            "id": self.id,
            "text": self.text,
            "user_id": self.user_id,
            "agent_id": self.agent_id,
            "session_id": self.session_id,
            "source": self.source,
            "metadata": self.metadata,
            "created_at": iso(self.created_at),
            "updated_at": iso(self.updated_at),
            "expires_at": iso(self.expires_at),
        }


def _memory(row: Sequence[Any]) -> Memory:
    return Memory(
        num=row[0], id=row[1], tenant=row[2], scope_key=row[3], user_id=row[4], agent_id=row[5],
        session_id=row[6], text=row[7], source=row[8], metadata=json.loads(row[9] or "{}"),
        created_at=row[10], updated_at=row[11], expires_at=row[12],
    )  # fmt: skip


def _record(conn: Connection, memory: Memory, event: str, old: str | None, new: str | None,
            source: str, now: float, job_ids: Sequence[str] = ()) -> None:  # fmt: skip
    """The history event and the change-log row that go with every memory write.

    ``job_ids``: the captured turns an extracted change came from (empty for manual writes).
    """
    conn.execute(
        "INSERT INTO history (memory_id, tenant, scope_key, event, old_text, new_text, source, created_at, "
        "job_ids) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (memory.id, memory.tenant, memory.scope_key, event, old, new, source, now,
         json.dumps(list(job_ids)) if job_ids else None),
    )  # fmt: skip
    op = "delete" if event == "DELETE" else "upsert"
    conn.execute(
        "INSERT INTO changes (tenant, scope_key, memory_num, op) VALUES (?, ?, ?, ?)",
        (memory.tenant, memory.scope_key, memory.num, op),
    )


def _check_source(source: str) -> None:
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}, not {source!r}")


def insert_memory(
    conn: Connection,
    scope: Scope,
    text: str,
    *,
    embedding: npt.NDArray[np.float32] | None,
    embed_model: str | None,
    source: str,
    now: float,
    session_id: str = "",
    metadata: dict[str, Any] | None = None,
    expires_at: float | None = None,
    memory_id: str | None = None,
    created_at: float | None = None,
    updated_at: float | None = None,
    job_ids: Sequence[str] = (),
) -> Memory:
    """Insert a memory (+ history ADD + change). Raises ``DuplicateMemory``.

    An *expired* memory with the same text does not block: it is deleted first.
    """
    _check_source(source)
    digest = text_hash(text)
    params = (
        memory_id or uuid.uuid4().hex, scope.tenant, scope.key, scope.user_id, scope.agent_id,
        session_id, text, digest, source, json.dumps(metadata or {}), created_at or now,
        updated_at or created_at or now, expires_at, vector_blob(embedding), embed_model,
    )  # fmt: skip
    sql = (
        "INSERT INTO memories (id, tenant, scope_key, user_id, agent_id, session_id, text, text_hash, "
        "source, metadata, created_at, updated_at, expires_at, embedding, embed_model) "
        f"VALUES ({', '.join('?' * len(params))}) RETURNING {_COLUMNS}"
    )
    try:
        with conn.savepoint():
            row = conn.execute(sql, params).fetchone()
    except IntegrityError:
        existing = conn.execute(
            "SELECT id, expires_at FROM memories WHERE tenant = ? AND scope_key = ? AND text_hash = ?",
            (scope.tenant, scope.key, digest),
        ).fetchone()
        if existing is None:
            raise  # the id collided, not the text
        if existing[1] is None or existing[1] > now:
            raise DuplicateMemory(existing[0]) from None
        delete_memory(conn, scope.tenant, existing[0], source=source, now=now, job_ids=job_ids)
        row = conn.execute(sql, params).fetchone()
    memory = _memory(row)
    _record(conn, memory, "ADD", None, text, source, now, job_ids)
    return memory


def update_memory(
    conn: Connection,
    tenant: str,
    memory_id: str,
    *,
    source: str,
    now: float,
    text: str | None = None,
    embedding: npt.NDArray[np.float32] | None = None,
    embed_model: str | None = None,
    metadata: dict[str, Any] | None = None,
    expires_at: float | None = UNSET,
    job_ids: Sequence[str] = (),
) -> Memory | None:
    """Change text (pass its new embedding too), metadata and/or expiry; None if not visible.

    Writes history UPDATE (old and new text) when the text changed, and a change either
    way. Raises ``DuplicateMemory`` if the new text equals another memory of the scope.
    """
    _check_source(source)
    current = get_memory(conn, tenant, memory_id, now)
    if current is None:
        return None
    sets: list[str] = ["updated_at = ?"]
    params: list[Any] = [now]
    if text is not None:
        sets += ["text = ?", "text_hash = ?", "embedding = ?", "embed_model = ?"]
        params += [text, text_hash(text), vector_blob(embedding), embed_model]
    if metadata is not None:
        sets.append("metadata = ?")
        params.append(json.dumps(metadata))
    if expires_at is not UNSET:
        sets.append("expires_at = ?")
        params.append(expires_at)
    try:
        with conn.savepoint():
            row = conn.execute(
                f"UPDATE memories SET {', '.join(sets)} WHERE tenant = ? AND num = ? RETURNING {_COLUMNS}",
                (*params, tenant, current.num),
            ).fetchone()
    except IntegrityError:
        existing = conn.execute(
            "SELECT id FROM memories WHERE tenant = ? AND scope_key = ? AND text_hash = ?",
            (tenant, current.scope_key, text_hash(text or "")),
        ).fetchone()
        raise DuplicateMemory(existing[0] if existing else "") from None
    memory = _memory(row)
    if memory.text != current.text:
        _record(conn, memory, "UPDATE", current.text, memory.text, source, now, job_ids)
    else:  # history is the text's: a metadata/expiry change is no event, but the index still hears of it
        conn.execute(
            "INSERT INTO changes (tenant, scope_key, memory_num, op) VALUES (?, ?, ?, 'upsert')",
            (memory.tenant, memory.scope_key, memory.num),
        )
    return memory


def delete_memory(conn: Connection, tenant: str, memory_id: str, *, source: str, now: float,
                  job_ids: Sequence[str] = ()) -> bool:  # fmt: skip
    """Delete a memory (expired ones too); history DELETE + change. False if not found."""
    row = conn.execute(
        f"DELETE FROM memories WHERE tenant = ? AND id = ? RETURNING {_COLUMNS}", (tenant, memory_id)
    ).fetchone()
    if row is None:
        return False
    memory = _memory(row)
    _record(conn, memory, "DELETE", memory.text, None, source, now, job_ids)
    return True


def get_memory(conn: Connection, tenant: str, memory_id: str, now: float) -> Memory | None:
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM memories WHERE tenant = ? AND id = ? AND {_VISIBLE}",
        (tenant, memory_id, now),
    ).fetchone()
    return _memory(row) if row else None


def encode_cursor(num: int) -> str:
    return base64.urlsafe_b64encode(f"m{num}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        if not raw.startswith("m"):
            raise ValueError(raw)
        return int(raw[1:])
    except ValueError:
        raise ApiError(400, "invalid cursor", param="cursor", code="invalid_cursor") from None


def _scope_filter(tenant: str, user_id: str | None, agent_id: str | None) -> tuple[str, list[Any]]:
    clauses, params = ["tenant = ?"], [tenant]
    if user_id is not None:
        clauses.append("user_id = ?")
        params.append(user_id)
    if agent_id is not None:
        clauses.append("agent_id = ?")
        params.append(agent_id)
    return " AND ".join(clauses), params


def list_memories(
    conn: Connection,
    tenant: str,
    user_id: str | None,
    agent_id: str | None,
    *,
    limit: int,
    cursor: str | None,
    now: float,
    source: str | None = None,
    has_expiry: bool | None = None,
) -> tuple[list[Memory], str | None]:
    """Visible memories in insertion order; ``None`` ids mean "any". Returns (page, next cursor).

    ``source`` and ``has_expiry`` (an ``expires_at`` is set) narrow it when not ``None``.
    """
    where, params = _scope_filter(tenant, user_id, agent_id)
    if source is not None:
        where += " AND source = ?"
        params.append(source)
    if has_expiry is not None:
        where += " AND expires_at IS NOT NULL" if has_expiry else " AND expires_at IS NULL"
    after = decode_cursor(cursor) if cursor else 0
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM memories WHERE {where} AND num > ? AND {_VISIBLE} ORDER BY num LIMIT ?",
        (*params, after, now, limit + 1),
    ).fetchall()
    page = [_memory(r) for r in rows[:limit]]
    next_cursor = encode_cursor(page[-1].num) if len(rows) > limit and page else None
    return page, next_cursor


def hydrate(
    conn: Connection, scope: Scope, nums: Iterable[int], now: float, embed_model: str
) -> dict[int, tuple[Memory, bytes | None]]:
    """Visible memories of ``scope`` by num, with their vector if it is of ``embed_model``."""
    wanted = list(nums)
    if not wanted:
        return {}
    rows = conn.execute(
        f"SELECT {_COLUMNS}, CASE WHEN embed_model = ? THEN embedding END FROM memories "
        f"WHERE tenant = ? AND scope_key = ? AND {_VISIBLE} "
        f"AND num IN ({', '.join('?' * len(wanted))})",
        (embed_model, scope.tenant, scope.key, now, *wanted),
    ).fetchall()
    return {r[0]: (_memory(r), r[13]) for r in rows}


def get_history(conn: Connection, tenant: str, memory_id: str) -> list[dict[str, Any]] | None:
    """A memory's events, oldest first (also after deletion); None if the tenant never had it."""
    rows = conn.execute(
        "SELECT event, old_text, new_text, created_at, source, job_ids FROM history "
        "WHERE tenant = ? AND memory_id = ? ORDER BY num",
        (tenant, memory_id),
    ).fetchall()
    if not rows:
        return None
    return [
        {"event": r[0], "old_text": r[1], "new_text": r[2], "created_at": iso(r[3]), "source": r[4],
         "job_ids": json.loads(r[5]) if r[5] else []}
        for r in rows
    ]  # fmt: skip


def forget_scope(conn: Connection, scope: Scope) -> dict[str, int]:
    """Erase every row of a scope; returns deleted counts per table.

    Leaves one reset marker in ``changes`` (no text) so an index loaded in another
    process notices and rebuilds instead of keeping forgotten entries in memory.
    """
    counts: dict[str, int] = {}
    for table in ("memories", "history", "messages", "jobs", "changes"):
        cursor = conn.execute(
            f"DELETE FROM {table} WHERE tenant = ? AND scope_key = ?", (scope.tenant, scope.key)
        )
        counts[table] = cursor.rowcount
    conn.execute(
        "INSERT INTO changes (tenant, scope_key, memory_num, op) VALUES (?, ?, ?, 'delete')",
        (scope.tenant, scope.key, RESET_MARKER_NUM),
    )
    return counts


def export_rows(
    conn: Connection, tenant: str, user_id: str | None, agent_id: str | None, now: float
) -> list[dict[str, Any]]:
    """Visible memories as JSON-ready dicts (the contract shape), in insertion order."""
    where, params = _scope_filter(tenant, user_id, agent_id)
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM memories WHERE {where} AND {_VISIBLE} ORDER BY num", (*params, now)
    ).fetchall()
    return [_memory(r).to_api() for r in rows]


def import_rows(
    conn: Connection,
    tenant: str,
    rows: Sequence[dict[str, Any]],
    embeddings: npt.NDArray[np.float32] | None,
    embed_model: str | None,
    now: float,
) -> dict[str, int]:
    """Insert exported dicts into ``tenant`` (ids, texts, metadata, timestamps preserved).

    A row whose id exists in this tenant, or whose text duplicates a memory of its scope,
    is skipped. An id taken by another tenant gets a fresh id (ids are global).
    """
    imported = skipped = 0
    for i, row in enumerate(rows):
        scope = Scope(tenant, str(row.get("user_id") or ""), str(row.get("agent_id") or ""))
        memory_id = str(row.get("id") or uuid.uuid4().hex)
        owner = conn.execute("SELECT tenant FROM memories WHERE id = ?", (memory_id,)).fetchone()
        if owner is not None and owner[0] == tenant:
            skipped += 1
            continue
        try:
            insert_memory(
                conn, scope, str(row["text"]),
                embedding=None if embeddings is None else embeddings[i], embed_model=embed_model,
                source=str(row.get("source") or "manual"), now=now,
                session_id=str(row.get("session_id") or ""), metadata=row.get("metadata") or {},
                expires_at=parse_time(row.get("expires_at")),
                memory_id=memory_id if owner is None else None,
                created_at=parse_time(row.get("created_at"), "created_at"),
                updated_at=parse_time(row.get("updated_at"), "updated_at"),
            )  # fmt: skip
            imported += 1
        except DuplicateMemory:
            skipped += 1
    return {"imported": imported, "skipped": skipped}
