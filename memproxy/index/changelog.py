"""Reads of the change log and the memory rows an index is derived from.

Invariants:
- Every read that pairs rows with a change seq runs in one read snapshot, so the seq is
  exactly what the rows reflect (an index built from them and caught up from that seq on
  agrees with the database).
- Only embeddings of the given embedder identity are returned; other rows come back with
  ``embedding=None`` (found lexically until re-embedded).
- Pure functions of a ``Connection``: the same SQL (SQLite's dialect) serves both engines.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from memproxy.scope import Scope
from memproxy.storage.database import RESET_MARKER_NUM
from memproxy.storage.engine import Connection


@dataclass
class Row:
    num: int
    text: str | None  # None: the memory no longer exists
    embedding: bytes | None


def read_scope_rows(conn: Connection, scope: Scope, identity: str) -> tuple[int, list[Row]]:
    """All rows of a scope plus the change seq they reflect, in one consistent read."""
    with conn.read_snapshot():
        seq = max_seq(conn, scope)
        rows = conn.execute(
            "SELECT num, text, CASE WHEN embed_model = ? THEN embedding END FROM memories "
            "WHERE tenant = ? AND scope_key = ? ORDER BY num",
            (identity, scope.tenant, scope.key),
        ).fetchall()
    return seq, [Row(r[0], r[1], _bytes(r[2])) for r in rows]


def read_changes(conn: Connection, scope: Scope, after: int, identity: str) -> tuple[int, list[Row]]:
    """Current state of every memory changed after ``after`` (last change per num wins).

    A row with num ``RESET_MARKER_NUM`` means the scope was forgotten meanwhile.
    """
    with conn.read_snapshot():
        rows = conn.execute(
            "SELECT c.memory_num, c.seq, m.text, CASE WHEN m.embed_model = ? THEN m.embedding END "
            "FROM (SELECT memory_num, max(seq) AS seq FROM changes "
            "      WHERE tenant = ? AND scope_key = ? AND seq > ? GROUP BY memory_num) c "
            "LEFT JOIN memories m ON m.num = c.memory_num AND m.tenant = ? AND m.scope_key = ?",
            (identity, scope.tenant, scope.key, after, scope.tenant, scope.key),
        ).fetchall()
    seq = max((int(r[1]) for r in rows), default=after)
    return seq, [Row(r[0], r[2], _bytes(r[3])) for r in rows]


def resets_after(conn: Connection, after: int) -> list[tuple[str, int]]:
    """(scope_key, seq) of each scope forgotten after change ``after`` (its newest marker)."""
    rows = conn.execute(
        # The marker as a literal, so the partial index ``changes_resets`` serves this query.
        f"SELECT scope_key, max(seq) FROM changes WHERE memory_num = {RESET_MARKER_NUM} AND seq > ? "
        "GROUP BY scope_key",
        (after,),
    ).fetchall()
    return [(str(r[0]), int(r[1])) for r in rows]


def _bytes(blob: bytes | memoryview | None) -> bytes | None:
    # Postgres hands BYTEA back as bytes or memoryview depending on the path; SQLite as bytes.
    return None if blob is None else bytes(blob)


def latest_seq(conn: Connection, scope: Scope) -> int:
    """The scope's newest change seq (what a caught-up index reflects)."""
    return max_seq(conn, scope)


def max_seq(conn: Connection, scope: Scope) -> int:
    # ORDER BY … DESC LIMIT 1 rather than max(): one backward seek in changes_scope_seq on both
    # engines, whatever Postgres's statistics say (with none yet it would scan the scope's rows).
    row = conn.execute(
        "SELECT seq FROM changes WHERE tenant = ? AND scope_key = ? ORDER BY seq DESC LIMIT 1",
        (scope.tenant, scope.key),
    ).fetchone()
    return int(row[0]) if row else 0


def blob_vectors(rows: list[Row], dim: int) -> tuple[list[int], npt.NDArray[np.float32]]:
    usable = [r for r in rows if r.embedding is not None and len(r.embedding) == dim * 4]
    if not usable:
        return [], np.zeros((0, dim), dtype=np.float32)
    matrix = np.frombuffer(b"".join(r.embedding for r in usable if r.embedding), dtype=np.float32)
    return [r.num for r in usable], matrix.reshape(len(usable), dim)
