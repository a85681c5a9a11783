"""The scopes of a tenant, for ``GET /v1/scopes`` and the console: who has memories or jobs.

Invariants:
- Every query filters by the caller's tenant; nothing here can name another tenant's scope.
- A scope is listed while it holds a memory (expired ones included: they still take space
  until purged) or a job; a forgotten scope has neither, so it disappears.
- Pages are in (user_id, agent_id) order; the cursor is the last pair of a page. Without a
  substring search a page costs one index seek per listed scope in ``memories`` and in
  ``jobs`` (a skip scan), whatever the number of memories behind each scope.
- Counts come from the rows at read time (no counters to drift).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from memproxy.errors import ApiError
from memproxy.scope import Scope
from memproxy.storage.engine import Connection
from memproxy.wire.times import iso

JOB_STATUSES = ("pending", "running", "done", "dead")


@dataclass(frozen=True, slots=True)
class ScopeSummary:
    user_id: str
    agent_id: str
    memories: int
    expired_memories: int
    jobs: dict[str, int]
    last_activity_at: float | None

    def to_api(self) -> dict[str, Any]:
        return {
            "object": "memproxy.scope",
            "user_id": self.user_id,
            "agent_id": self.agent_id,
            "memories": self.memories,
            "expired_memories": self.expired_memories,
            "jobs": self.jobs,
            "last_activity_at": iso(self.last_activity_at),
        }


def encode_cursor(user_id: str, agent_id: str) -> str:
    raw = json.dumps([user_id, agent_id], ensure_ascii=False).encode()
    return base64.urlsafe_b64encode(b"s" + raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[str, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        if not raw.startswith(b"s"):
            raise ValueError("not a scope cursor")
        pair = json.loads(raw[1:])
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) for p in pair)):
            raise ValueError("not a pair")
        return pair[0], pair[1]
    except ValueError:  # binascii.Error, UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ApiError(400, "invalid cursor", param="cursor", code="invalid_cursor") from None


def _like(text: str) -> str:
    escaped = text.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _filters(tenant: str, after: tuple[str, str] | None, user_id: str | None, agent_id: str | None,
             q: str | None) -> tuple[str, list[Any]]:  # fmt: skip
    clauses, params = ["tenant = ?"], [tenant]
    if after is not None:
        clauses.append("(user_id, agent_id) > (?, ?)")
        params += list(after)
    if user_id is not None:
        clauses.append("user_id = ?")
        params.append(user_id)
    if agent_id is not None:
        clauses.append("agent_id = ?")
        params.append(agent_id)
    if q:
        clauses.append("(lower(user_id) LIKE ? ESCAPE '\\' OR lower(agent_id) LIKE ? ESCAPE '\\')")
        params += [_like(q), _like(q)]
    return " AND ".join(clauses), params


def list_scopes(
    conn: Connection,
    tenant: str,
    *,
    limit: int,
    cursor: str | None,
    now: float,
    user_id: str | None = None,
    agent_id: str | None = None,
    q: str | None = None,
) -> tuple[list[ScopeSummary], str | None]:
    """One page of the tenant's scopes; ``None`` ids mean "any", ``q`` is a substring of either id
    (case-insensitive). Returns (page, next cursor)."""
    after = decode_cursor(cursor) if cursor else None
    keys: set[tuple[str, str]] = set()
    for table in ("memories", "jobs"):
        if q:  # a substring filter reads every id anyway: one scan
            where, params = _filters(tenant, after, user_id, agent_id, q)
            found = conn.execute(
                f"SELECT DISTINCT user_id, agent_id FROM {table} WHERE {where} "
                "ORDER BY user_id, agent_id LIMIT ?",
                (*params, limit + 1),
            ).fetchall()
            keys.update((str(r[0]), str(r[1])) for r in found)
        else:
            keys.update(_skip_scan(conn, table, tenant, after, user_id, agent_id, limit + 1))
    ordered = sorted(keys)[: limit + 1]
    page = ordered[:limit]
    next_cursor = encode_cursor(*page[-1]) if len(ordered) > limit else None
    return [summarize(conn, Scope(tenant, u, a), now) for u, a in page], next_cursor


def _skip_scan(conn: Connection, table: str, tenant: str, after: tuple[str, str] | None,
               user_id: str | None, agent_id: str | None, limit: int) -> list[tuple[str, str]]:  # fmt: skip
    """The next ``limit`` distinct (user_id, agent_id) after ``after``: one index seek each, so a
    scope with 100k memories costs what a scope with one does (a DISTINCT would read them all)."""
    keys: list[tuple[str, str]] = []
    while len(keys) < limit:
        where, params = _filters(tenant, keys[-1] if keys else after, user_id, agent_id, None)
        row = conn.execute(
            f"SELECT user_id, agent_id FROM {table} WHERE {where} ORDER BY user_id, agent_id LIMIT 1", params
        ).fetchone()
        if row is None:
            break
        keys.append((str(row[0]), str(row[1])))
    return keys


def summarize(conn: Connection, scope: Scope, now: float) -> ScopeSummary:
    """Counts and last activity of one scope (index seeks and index-only counts).

    Last activity is the newest history event (every memory add, text change and delete
    writes one) or job change; a metadata-only edit does not move it.
    """
    key = (scope.tenant, scope.key)
    # Index-only counts (memories_scope_expiry); no per-row reads even for a 100k-memory scope.
    (total,) = conn.execute(
        "SELECT count(*) FROM memories WHERE tenant = ? AND scope_key = ?", key
    ).fetchone()
    (expired,) = conn.execute(
        "SELECT count(*) FROM memories WHERE tenant = ? AND scope_key = ? AND expires_at <= ?", (*key, now)
    ).fetchone()
    jobs = dict.fromkeys(JOB_STATUSES, 0)
    last_job = None
    for status, count, updated in conn.execute(
        "SELECT status, count(*), max(updated_at) FROM jobs WHERE tenant = ? AND scope_key = ? "
        "GROUP BY status",
        key,
    ).fetchall():
        jobs[str(status)] = int(count)
        last_job = max(last_job or updated, updated)
    # The newest event is the one with the highest num: one seek in history_scope (scope_key, num).
    event = conn.execute(
        "SELECT created_at FROM history WHERE scope_key = ? AND tenant = ? ORDER BY num DESC LIMIT 1",
        (scope.key, scope.tenant),
    ).fetchone()
    last_event = event[0] if event else None
    times = [t for t in (last_job, last_event) if t is not None]
    return ScopeSummary(
        scope.user_id, scope.agent_id, int(total) - int(expired), int(expired), jobs,
        max(times) if times else None,
    )  # fmt: skip
