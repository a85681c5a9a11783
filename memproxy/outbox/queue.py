"""The durable outbox: one ``jobs`` row per captured turn, worked off by extraction workers.

Invariants:
- A job and its ``messages`` rows are written in the caller's transaction (``enqueue``),
  so a turn is either fully queued or not at all.
- States: ``pending`` → ``running`` (leased: ``lease_owner`` + ``lease_until``) → ``done``,
  or back to ``pending`` with a backoff (``fail``), or ``dead`` after
  ``extraction.max_attempts``. ``retry`` puts a dead job back to ``pending``.
- ``attempts`` counts claims, so an attempt that crashed the process still counts.
- A running job whose lease has expired is claimable again (its worker is presumed dead).
  Every state change a worker makes checks it still holds the lease (``owner``), so a
  worker that lost its lease can never complete or fail a job another worker holds.
- At most one batch of a scope is leased at a time (claims skip scopes with a live
  lease), so two workers never extract from the same scope's memories concurrently,
  in one process or across machines on Postgres (see ``claim``).
- Functions that API callers use take the tenant and filter by it; another tenant's job
  is indistinguishable from a missing one. The sync functions never commit, except
  ``claim`` (its own exclusive transaction) and ``extend`` (a heartbeat).
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memproxy.scope import Scope
from memproxy.storage.engine import JOBS_CHANNEL, Connection, IntegrityError
from memproxy.wire.times import iso

STATUSES = ("pending", "running", "done", "dead")
_JOB_COLUMNS = (
    "id, tenant, scope_key, user_id, agent_id, session_id, status, attempts, lease_owner, lease_until, "
    "next_attempt_at, last_error, prompt_tokens, completion_tokens, created_at, updated_at, report"
)
MAX_ERROR_CHARS = 2000


class LeaseLost(Exception):
    """The worker no longer holds the lease of a job it tried to finish."""


@dataclass(frozen=True, slots=True)
class Job:
    id: str
    tenant: str
    scope_key: str
    user_id: str
    agent_id: str
    session_id: str
    status: str
    attempts: int
    lease_owner: str | None
    lease_until: float | None
    next_attempt_at: float
    last_error: str | None
    prompt_tokens: int
    completion_tokens: int
    created_at: float
    updated_at: float
    # JSON of what the extraction did (applied counts, rejected operations, empty answer).
    report: str | None = None

    @property
    def scope(self) -> Scope:
        return Scope(self.tenant, self.user_id, self.agent_id)

    def to_api(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "memproxy.job",
            "status": self.status,
            "user_id": self.user_id,
            "agent_id": self.agent_id,
            "session_id": self.session_id,
            "attempts": self.attempts,
            "last_error": self.last_error,
            "next_attempt_at": iso(self.next_attempt_at) if self.status == "pending" else None,
            "usage": {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens},
            "created_at": iso(self.created_at),
            "updated_at": iso(self.updated_at),
            "report": json.loads(self.report) if self.report else None,
        }


def _job(row: Sequence[Any]) -> Job:
    return Job(*row)


def new_job_id() -> str:
    return "job_" + uuid.uuid4().hex


def encode_message(message: dict[str, Any]) -> str:
    """A captured message as stored in ``messages.content``: its JSON, role included."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"))


def enqueue(
    conn: Connection,
    job_id: str,
    scope: Scope,
    session_id: str,
    messages: Sequence[dict[str, Any]],
    now: float,
) -> None:
    """Insert the turn's messages and its pending job. Caller owns the transaction."""
    conn.executemany(
        "INSERT INTO messages (tenant, scope_key, user_id, agent_id, session_id, job_id, role, content, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (scope.tenant, scope.key, scope.user_id, scope.agent_id, session_id, job_id,
             str(m.get("role", "")), encode_message(m), now)
            for m in messages
        ],
    )  # fmt: skip
    conn.execute(
        "INSERT INTO jobs (id, tenant, scope_key, user_id, agent_id, session_id, status, next_attempt_at, "
        "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?)",
        (job_id, scope.tenant, scope.key, scope.user_id, scope.agent_id, session_id, now, now, now),
    )
    conn.notify(JOBS_CHANNEL)  # Postgres: wakes idle workers on every machine at commit


_DUE = "((status = 'pending' AND next_attempt_at <= :now) OR (status = 'running' AND lease_until < :now))"
_LIVE_LEASE = (
    "SELECT 1 FROM jobs o WHERE o.scope_key = {scope} AND o.tenant = {tenant} "
    "AND o.status = 'running' AND o.lease_until >= :now"
)
# Scopes another claimer holds right now are skipped; after this many, give up this round.
_MAX_SKIPPED_SCOPES = 16


def claim(conn: Connection, owner: str, now: float, lease_s: float, max_jobs: int) -> list[Job]:
    """Lease the oldest due job plus up to ``max_jobs - 1`` more due jobs of its scope.

    Due: pending with ``next_attempt_at <= now``, or running with an expired lease.
    Scopes with a live lease are skipped. Returns [] when nothing is due.

    SQLite: ``BEGIN IMMEDIATE`` makes this the only claimer. Postgres: claimers run
    concurrently; rows another claimer locked are skipped (``FOR UPDATE SKIP LOCKED``) and
    a transaction-level advisory lock on the scope key keeps two claimers out of one scope.
    Whoever gets that lock re-checks for a live lease in a fresh statement, so a scope
    claimed (and committed) a moment ago is seen.
    """
    with conn.exclusive():
        first = _claimable_scope(conn, now)
        if first is None:
            return []
        rows = conn.execute(
            f"UPDATE jobs SET status = 'running', lease_owner = :owner, lease_until = :until, "
            f"attempts = attempts + 1, updated_at = :now WHERE id IN ("
            f"  SELECT id FROM jobs WHERE tenant = :tenant AND scope_key = :scope AND {_DUE} "
            f"  ORDER BY created_at, rowid LIMIT :limit{conn.skip_locked}) RETURNING {_JOB_COLUMNS}",
            {"now": now, "owner": owner, "until": now + lease_s, "tenant": first[0], "scope": first[1],
             "limit": max_jobs},
        ).fetchall()  # fmt: skip
    return sorted((_job(r) for r in rows), key=lambda job: job.created_at)


def enqueue_once(
    conn: Connection,
    job_id: str,
    scope: Scope,
    session_id: str,
    messages: Sequence[dict[str, Any]],
    now: float,
) -> bool:
    """``enqueue`` unless the outbox already holds ``job_id`` (a spooled turn moved again);
    False when it did. Caller owns the transaction."""
    if conn.execute("SELECT 1 FROM jobs WHERE id = ?", (job_id,)).fetchone() is not None:
        return False
    try:
        with conn.savepoint():
            enqueue(conn, job_id, scope, session_id, messages, now)
    except IntegrityError:  # another process moved it a moment ago
        return False
    return True


def _claimable_scope(conn: Connection, now: float) -> tuple[str, str] | None:
    """(tenant, scope_key) of the oldest due job whose scope this transaction now holds."""
    skipped: list[str] = []
    while len(skipped) <= _MAX_SKIPPED_SCOPES:
        marks = "".join(f", :skip{i}" for i in range(len(skipped)))
        first = conn.execute(
            f"SELECT tenant, scope_key FROM jobs j WHERE {_DUE} "
            f"AND j.scope_key NOT IN (''{marks}) "
            f"AND NOT EXISTS ({_LIVE_LEASE.format(scope='j.scope_key', tenant='j.tenant')}) "
            f"ORDER BY created_at, rowid LIMIT 1{conn.skip_locked}",
            {"now": now, **{f"skip{i}": key for i, key in enumerate(skipped)}},
        ).fetchone()
        if first is None:
            return None
        tenant, scope_key = str(first[0]), str(first[1])
        if conn.try_lock(scope_key):
            live = conn.execute(
                _LIVE_LEASE.format(scope=":scope", tenant=":tenant"),
                {"scope": scope_key, "tenant": tenant, "now": now},
            ).fetchone()
            if live is None:
                return tenant, scope_key
        skipped.append(scope_key)
    return None


def _owned_update(conn: Connection, job_ids: Sequence[str], owner: str, sets: str,
                  params: dict[str, Any]) -> None:  # fmt: skip
    marks = ", ".join(f":id{i}" for i in range(len(job_ids)))
    cursor = conn.execute(
        f"UPDATE jobs SET {sets} WHERE id IN ({marks}) AND status = 'running' AND lease_owner = :owner",
        {**params, "owner": owner, **{f"id{i}": job_id for i, job_id in enumerate(job_ids)}},
    )
    if cursor.rowcount != len(job_ids):
        raise LeaseLost(
            f"{len(job_ids) - cursor.rowcount} of {len(job_ids)} jobs are no longer leased by {owner}"
        )


def token_shares(total: int, parts: int) -> list[int]:
    """Split a batch's token count over its jobs so the per-job numbers add up to it."""
    base, rest = divmod(max(total, 0), parts)
    return [base + (1 if i < rest else 0) for i in range(parts)]


def _add_tokens(conn: Connection, job_ids: Sequence[str], prompt: int, completion: int) -> None:
    for job_id, p, c in zip(job_ids, token_shares(prompt, len(job_ids)),
                            token_shares(completion, len(job_ids)), strict=True):  # fmt: skip
        conn.execute(
            "UPDATE jobs SET prompt_tokens = prompt_tokens + ?, completion_tokens = completion_tokens + ? "
            "WHERE id = ?",
            (p, c, job_id),
        )


def complete(
    conn: Connection, job_ids: Sequence[str], owner: str, now: float, *, prompt_tokens: int = 0,
    completion_tokens: int = 0, report: dict[str, Any] | None = None,
) -> None:  # fmt: skip
    """Mark leased jobs done (raises ``LeaseLost``, so the caller's transaction rolls back).

    ``report`` (what the extraction applied and refused) is stored on every job of the batch.
    """
    _owned_update(conn, job_ids, owner, "status = 'done', lease_owner = NULL, lease_until = NULL, "
                  "last_error = NULL, updated_at = :now, report = :report",
                  {"now": now, "report": json.dumps(report) if report is not None else None})  # fmt: skip
    _add_tokens(conn, job_ids, prompt_tokens, completion_tokens)


def backoff_delay(attempts: int, base_s: float, max_s: float, rng: random.Random | None = None) -> float:
    """Exponential backoff with "equal jitter": half fixed, half random, capped at ``max_s``."""
    ceiling = min(max_s, base_s * 2.0 ** max(attempts - 1, 0))
    return ceiling / 2 + (rng or random).uniform(0.0, ceiling / 2)


def fail(
    conn: Connection,
    jobs: Sequence[Job],
    owner: str,
    error: str,
    now: float,
    *,
    max_attempts: int,
    backoff_base_s: float,
    backoff_max_s: float,
    prompt_tokens: int = 0,
    completion_tokens: int = 0,
) -> list[str]:
    """Record a failed attempt: back to pending after a backoff, or dead. Returns the dead ids."""
    dead: list[str] = []
    for job in jobs:
        if job.attempts >= max_attempts:
            dead.append(job.id)
            sets, params = "status = 'dead'", {}
        else:
            delay = backoff_delay(job.attempts, backoff_base_s, backoff_max_s)
            sets, params = "status = 'pending', next_attempt_at = :next", {"next": now + delay}
        _owned_update(conn, [job.id], owner,
                      f"{sets}, lease_owner = NULL, lease_until = NULL, last_error = :error, updated_at = :now",
                      {**params, "error": error[:MAX_ERROR_CHARS], "now": now})  # fmt: skip
    _add_tokens(conn, [job.id for job in jobs], prompt_tokens, completion_tokens)
    return dead


def extend(conn: Connection, job_ids: Sequence[str], owner: str, lease_until: float) -> int:
    """Push the lease of jobs still held by ``owner`` forward (a heartbeat while working)."""
    marks = ", ".join("?" * len(job_ids))
    with conn:
        cursor = conn.execute(
            f"UPDATE jobs SET lease_until = ? WHERE id IN ({marks}) AND status = 'running' AND lease_owner = ?",
            (lease_until, *job_ids, owner),
        )
    return cursor.rowcount


def release(conn: Connection, owner: str, now: float) -> int:
    """Give back every lease ``owner`` holds (shutdown): pending again, attempt not counted."""
    cursor = conn.execute(
        "UPDATE jobs SET status = 'pending', lease_owner = NULL, lease_until = NULL, "
        "attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END, next_attempt_at = ?, updated_at = ? "
        "WHERE status = 'running' AND lease_owner = ?",
        (now, now, owner),
    )
    return cursor.rowcount


def get_job(conn: Connection, tenant: str, job_id: str) -> Job | None:
    row = conn.execute(
        f"SELECT {_JOB_COLUMNS} FROM jobs WHERE tenant = ? AND id = ?", (tenant, job_id)
    ).fetchone()
    return _job(row) if row else None


def list_jobs(
    conn: Connection,
    tenant: str,
    status: str | None,
    limit: int = 100,
    after: tuple[float, str] | None = None,
    user_id: str | None = None,
    agent_id: str | None = None,
    newest_first: bool = False,
) -> list[Job]:
    """A tenant's jobs, oldest first (by ``(created_at, id)``; ``newest_first`` reverses it),
    optionally of one status and/or scope ids (``None``: any), optionally only those after the
    ``(created_at, id)`` of a previous page's last job in that order."""
    clauses: list[str] = ["tenant = ?"]
    params: list[Any] = [tenant]
    for column, value in (("status", status), ("user_id", user_id), ("agent_id", agent_id)):
        if value is not None:
            clauses.append(f"{column} = ?")
            params.append(value)
    beyond, order = ("<", "DESC") if newest_first else (">", "ASC")
    if after is not None:
        clauses.append(f"(created_at {beyond} ? OR (created_at = ? AND id {beyond} ?))")
        params.extend((after[0], after[0], after[1]))
    rows = conn.execute(
        f"SELECT {_JOB_COLUMNS} FROM jobs WHERE {' AND '.join(clauses)} "
        f"ORDER BY created_at {order}, id {order} LIMIT ?",
        (*params, limit),
    ).fetchall()
    return [_job(r) for r in rows]


def captured_messages(conn: Connection, tenant: str, job_id: str) -> list[dict[str, Any]]:
    """The turn a job captured, in capture order, as the API shows it (tenant-bound)."""
    rows = conn.execute(
        "SELECT role, content, session_id, created_at FROM messages WHERE tenant = ? AND job_id = ? "
        "ORDER BY num",
        (tenant, job_id),
    ).fetchall()
    return [
        {"role": r[0], "message": json.loads(r[1]), "session_id": r[2], "created_at": iso(r[3])} for r in rows
    ]


def retry(conn: Connection, tenant: str, job_id: str, now: float) -> Job | None:
    """Re-queue a dead job with a fresh attempt budget. None if the tenant has no such job.

    Jobs that are not dead are returned unchanged (retrying them would be a no-op or,
    for done jobs, a second extraction of the same turn).
    """
    row = conn.execute(
        f"UPDATE jobs SET status = 'pending', attempts = 0, next_attempt_at = ?, last_error = NULL, "
        f"updated_at = ? WHERE tenant = ? AND id = ? AND status = 'dead' RETURNING {_JOB_COLUMNS}",
        (now, now, tenant, job_id),
    ).fetchone()
    if row is not None:
        return _job(row)
    return get_job(conn, tenant, job_id)


def job_messages(conn: Connection, job_ids: Sequence[str]) -> list[tuple[int, str, dict[str, Any]]]:
    """The captured messages of jobs as ``(num, session_id, message)``, in capture order."""
    marks = ", ".join("?" * len(job_ids))
    rows = conn.execute(
        f"SELECT num, session_id, content FROM messages WHERE job_id IN ({marks}) ORDER BY num",
        tuple(job_ids),
    ).fetchall()
    return [(int(r[0]), str(r[1]), json.loads(r[2])) for r in rows]


def earlier_messages(
    conn: Connection, tenant: str, scope_key: str, session_id: str, before_num: int, limit: int
) -> list[dict[str, Any]]:
    """Up to ``limit`` messages of a session captured before ``before_num``, oldest first."""
    if limit <= 0 or not session_id:
        return []
    rows = conn.execute(
        "SELECT content FROM messages WHERE tenant = ? AND scope_key = ? AND session_id = ? AND num < ? "
        "ORDER BY num DESC LIMIT ?",
        (tenant, scope_key, session_id, before_num, limit),
    ).fetchall()
    return [json.loads(r[0]) for r in reversed(rows)]


def count_by_status(conn: Connection) -> dict[str, int]:
    """Jobs per status across tenants (for metrics and readiness)."""
    counts = dict.fromkeys(STATUSES, 0)
    for status, n in conn.execute("SELECT status, count(*) FROM jobs GROUP BY status").fetchall():
        counts[str(status)] = int(n)
    return counts
