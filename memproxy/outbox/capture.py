"""Capture: write each completed chat turn to the outbox, durably, without hurting the answer.

What a turn is: the request's *new* input — the user and tool messages after the last
assistant message (so a client resending its whole history does not re-capture old
turns) — plus the assistant's reply (choice 0), tool calls included. System and
developer messages, the caller's and memproxy's injected ``<memories>`` message alike,
are never captured.

Invariants:
- A turn's messages and its job row commit in one database transaction (``outbox.enqueue``, on
  SQLite and Postgres alike).
- The job id is chosen before the upstream call, so a streamed response's headers can
  carry it; the job row only exists once the completion succeeded: non-streamed before
  the response is returned, streamed when the upstream stream finished with a
  ``finish_reason``. Failed, cut-off or client-aborted completions are not captured.
- Postgres unreachable: the turn is appended to the local spool (fsynced) instead and
  moved into the outbox when the database is back (``outbox.spool``); the answer carries
  its job id as usual.
- SQLite locked by another process (``serve --workers N``, ``memproxy worker``, an import)
  for longer than the connection's ``busy_timeout``: the write is tried again, for up to
  ``LOCKED_PATIENCE_S`` in all. A streamed turn's headers already carry its job id, so a
  write given up here is an answered turn lost with nothing but a log line to show for it;
  waiting delays only the end of that answer, and only while the lock is held.
- Capture never breaks the answer: a failed write is logged and counted and reported in
  the ``X-Memproxy-Capture`` header when the headers are still unsent (``failed``).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from memproxy.outbox import queue as outbox
from memproxy.outbox.spool import Spool
from memproxy.scope import RequestScope, Scope
from memproxy.storage.database import Database
from memproxy.storage.engine import Connection, DatabaseUnavailable
from memproxy.wire.headers import CAPTURE_RESULT
from memproxy.wire.message_text import content_text

log = logging.getLogger(__name__)

HEADER = CAPTURE_RESULT
OFF = "off"
FAILED = "failed"
CAPTURED_ROLES = ("user", "tool", "function")
# How long a capture keeps trying a database another process holds locked (each try itself
# waits the connection's busy_timeout, 5 s): a long import or a stalled process, not contention.
LOCKED_PATIENCE_S = 30.0
_LOCKED_PAUSE_S = 0.1
# Kept from a captured message besides role and content.
_KEPT_KEYS = ("name", "tool_call_id", "tool_calls", "function_call")


def _normalized(message: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.get("role"), "content": content_text(message.get("content"))}
    out.update({key: message[key] for key in _KEPT_KEYS if message.get(key)})
    return out


def new_input(messages: list[Any]) -> list[dict[str, Any]]:
    """User and tool messages after the last assistant message, normalized."""
    start = 0
    for i, message in enumerate(messages):
        if isinstance(message, dict) and message.get("role") == "assistant":
            start = i + 1
    return [
        _normalized(m) for m in messages[start:] if isinstance(m, dict) and m.get("role") in CAPTURED_ROLES
    ]


def reply_from_response(response: dict[str, Any]) -> dict[str, Any] | None:
    """The assistant message of choice 0 of a (non-streamed) completion, if any."""
    for choice in response.get("choices") or []:
        if (
            isinstance(choice, dict)
            and choice.get("index", 0) == 0
            and isinstance(choice.get("message"), dict)
        ):
            message = _normalized(choice["message"])
            message["role"] = "assistant"
            return message
    return None


class StreamAccumulator:
    """Rebuilds choice 0's assistant message from relayed chunk dicts."""

    def __init__(self) -> None:
        self._content: list[str] = []
        self._tool_calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None

    def feed(self, chunk: dict[str, Any]) -> None:
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self._content.append(delta["content"])
            for call in delta.get("tool_calls") or ():
                self._merge_tool_call(call)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]

    def _merge_tool_call(self, delta: dict[str, Any]) -> None:
        slot = self._tool_calls.setdefault(
            int(delta.get("index") or 0),
            {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
        )
        if delta.get("id"):
            slot["id"] = delta["id"]
        if delta.get("type"):
            slot["type"] = delta["type"]
        function = delta.get("function") or {}
        if function.get("name") and not slot["function"]["name"]:
            slot["function"]["name"] = function["name"]
        if function.get("arguments"):
            slot["function"]["arguments"] += function["arguments"]

    @property
    def complete(self) -> bool:
        """The stream ended the way a finished completion does (with a finish reason)."""
        return self.finish_reason is not None

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self._content) or None}
        if self._tool_calls:
            message["tool_calls"] = [self._tool_calls[i] for i in sorted(self._tool_calls)]
        return message


@dataclass
class PlannedCapture:
    """A turn that will be captured if its completion succeeds; ``job_id`` is fixed now."""

    job_id: str
    scope: Scope
    session_id: str
    inputs: list[dict[str, Any]]


class Capture:
    def __init__(
        self, db: Database, clock: Callable[[], float] = time.time, spool: Spool | None = None
    ) -> None:
        self.db = db
        self.clock = clock
        # Postgres only: where turns go while the database is unreachable.
        self.spool = spool
        # Wired by the app: wake the worker; count a failure / a spooled turn in /metrics.
        self.on_enqueued: Callable[[], None] | None = None
        self.on_failure: Callable[[], None] | None = None
        self.on_spooled: Callable[[], None] | None = None

    async def _write(
        self, job_id: str, scope: Scope, session_id: str, messages: list[dict[str, Any]]
    ) -> None:
        """Queue a turn: into the outbox, or into the spool while the database is away."""
        now = self.clock()
        try:
            await self._enqueue_while_locked(job_id, scope, session_id, messages, now)
        except DatabaseUnavailable:
            if self.spool is None:
                raise
            await self.spool.append(job_id, scope, session_id, messages, now)
            log.info("database unavailable: turn of job %s spooled to disk", job_id)
            if self.on_spooled is not None:
                self.on_spooled()
            return
        if self.on_enqueued is not None:
            self.on_enqueued()

    async def _enqueue_while_locked(
        self, job_id: str, scope: Scope, session_id: str, messages: list[dict[str, Any]], now: float
    ) -> None:
        deadline = time.monotonic() + LOCKED_PATIENCE_S
        while True:
            try:
                await enqueue_turn(self.db, job_id, scope, session_id, messages, now)
                return
            except sqlite3.OperationalError as exc:
                if not _locked(exc) or time.monotonic() >= deadline:
                    raise
                log.warning("capture of job %s: database locked by another process (%s); trying again",
                            job_id, exc)  # fmt: skip
            await asyncio.sleep(_LOCKED_PAUSE_S)

    def plan(
        self, request_scope: RequestScope, body: dict[str, Any], inputs: list[dict[str, Any]] | None = None
    ) -> PlannedCapture | None:
        """None when this request captures nothing (memory off or ``X-Memproxy-Capture: off``).

        ``inputs``: the turn's new input already in chat shape (other API surfaces work it
        out themselves); by default it is taken from a chat body's ``messages``."""
        if not request_scope.memory_on or not request_scope.capture:
            return None
        if inputs is None:
            messages = body.get("messages")
            inputs = new_input(messages if isinstance(messages, list) else [])
        return PlannedCapture(outbox.new_job_id(), request_scope.scope, request_scope.session_id, inputs)

    async def commit(self, plan: PlannedCapture, reply: dict[str, Any] | None) -> str:
        """Write the turn and its job in one transaction; return the capture header value.

        The job id when queued, ``failed`` when the write failed (logged and counted; the
        answer goes out regardless), ``off`` when there was nothing to capture.
        """
        turn = [*plan.inputs, *([reply] if reply else [])]
        if not turn:
            return OFF
        try:
            await self._write(plan.job_id, plan.scope, plan.session_id, turn)
        except Exception as exc:
            log.error("capture of job %s failed; the answer was still delivered: %s", plan.job_id, exc)
            if self.on_failure is not None:
                self.on_failure()
            return FAILED
        return plan.job_id

    async def enqueue_messages(self, scope: Scope, session_id: str, messages: list[dict[str, Any]]) -> str:
        """Queue already-validated messages for extraction (``POST /v1/memories`` with
        ``messages``); returns the job id. Raises if the write fails."""
        job_id = outbox.new_job_id()
        await self._write(job_id, scope, session_id, messages)
        return job_id

    def not_captured(self, plan: PlannedCapture, reason: str) -> None:
        log.info("turn of job %s not captured: %s", plan.job_id, reason)


def _locked(exc: sqlite3.OperationalError) -> bool:
    """SQLite's "another connection holds the lock" (``SQLITE_BUSY*``, ``SQLITE_LOCKED*``)."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    return name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in str(exc)


async def enqueue_turn(
    db: Database, job_id: str, scope: Scope, session_id: str, messages: list[dict[str, Any]], now: float
) -> None:
    def write(conn: Connection) -> None:
        with conn:
            outbox.enqueue(conn, job_id, scope, session_id, messages, now)

    await db.run(write)


class Accumulator(Protocol):
    """Rebuilds a streamed reply from relayed events (one per API surface)."""

    def feed(self, event: dict[str, Any]) -> None: ...

    @property
    def complete(self) -> bool: ...

    def message(self) -> dict[str, Any] | None: ...


class StreamCapture:
    """Feeds relayed chunks to an accumulator; commits when the upstream stream finished."""

    def __init__(
        self, capture: Capture, plan: PlannedCapture, accumulator: Accumulator | None = None
    ) -> None:
        self.capture = capture
        self.plan = plan
        self.accumulator: Accumulator = accumulator or StreamAccumulator()

    def feed(self, chunk: dict[str, Any]) -> None:
        self.accumulator.feed(chunk)

    async def finish(self) -> str:
        """Called once the upstream stream ended without error (before ``[DONE]`` is sent)."""
        if not self.accumulator.complete:
            self.capture.not_captured(self.plan, "stream ended without a finish reason")
            return OFF
        return await self.capture.commit(self.plan, self.accumulator.message())
