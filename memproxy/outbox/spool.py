"""The capture spool: turns answered while Postgres is unreachable, kept on this replica's
disk until they can be moved into the outbox.

Invariants:
- ``append`` writes one JSON line and fsyncs it before returning, so a turn the caller was
  told is captured survives a crash of this process while the database is away.
- Appends go to ``<data_dir>/spool/current.jsonl``. A drain first renames that file to
  ``<time_ns>.jsonl`` (under an exclusive ``flock``, shared with appends, so a line is never
  half in one file), then moves the lines of every such file, oldest file first, line by
  line in order, each in its own transaction that skips a job id the outbox already holds
  (``outbox.enqueue_once``). A drain that stops half way (crash, database gone again)
  is simply redone: no turn is queued twice, none is lost. A file is deleted only when
  every line in it is in the database.
- Several processes on one data dir (``serve --workers N``) may drain at once: the job id
  check and the jobs primary key keep each turn single.
- Spool paths are fixed names: no request value ever becomes a path. A torn last line (the
  process died mid-append, so its caller never got an answer) is skipped with a warning.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memproxy.outbox import queue as outbox
from memproxy.scope import Scope
from memproxy.storage.database import Database
from memproxy.storage.engine import Connection, DatabaseUnavailable

log = logging.getLogger(__name__)

CURRENT = "current.jsonl"


class Spool:
    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.dir.mkdir(parents=True, exist_ok=True)
        with (self.dir / ".lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _append(self, line: bytes) -> None:
        with self._locked():
            fd = os.open(self.dir / CURRENT, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)

    async def append(
        self, job_id: str, scope: Scope, session_id: str, messages: list[dict[str, Any]], now: float
    ) -> None:
        record = {"job_id": job_id, "tenant": scope.tenant, "user_id": scope.user_id,
                  "agent_id": scope.agent_id, "session_id": session_id, "messages": messages, "at": now}  # fmt: skip
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
        await asyncio.to_thread(self._append, line)

    def _files(self) -> list[Path]:
        """Files waiting to be drained, oldest first (``current`` last)."""
        if not self.dir.exists():
            return []
        rotated = sorted((p for p in self.dir.glob("*.jsonl") if p.name != CURRENT), key=lambda p: p.name)
        current = self.dir / CURRENT
        return [*rotated, *([current] if current.exists() else [])]

    def pending(self) -> int:
        """Turns waiting on disk (counted from the files, so every process agrees)."""
        total = 0
        for path in self._files():
            with contextlib.suppress(FileNotFoundError), path.open("rb") as handle:
                total += sum(1 for line in handle if line.strip())
        return total

    def _rotate(self) -> list[Path]:
        with self._locked():
            current = self.dir / CURRENT
            if current.exists() and current.stat().st_size:
                current.rename(self.dir / f"{time.time_ns():020d}.jsonl")
            return [p for p in self._files() if p.name != CURRENT]

    async def drain(self, db: Database) -> int:
        """Move every spooled turn into the outbox, in order; returns how many were new.

        Raises ``DatabaseUnavailable`` if the database goes away meanwhile (what was moved
        stays moved; the rest is moved by the next drain)."""
        moved = 0
        for path in await asyncio.to_thread(self._rotate):
            records = await asyncio.to_thread(_read_records, path)
            for record in records:
                if await db.run(lambda c, r=record: _move(c, r)):  # type: ignore[misc]
                    moved += 1
            with contextlib.suppress(FileNotFoundError):
                await asyncio.to_thread(path.unlink)
        if moved:
            log.info("moved %d spooled turn(s) into the outbox", moved)
        return moved


def _read_records(path: Path) -> list[dict[str, Any]]:
    records = []
    try:
        lines = path.read_bytes().splitlines()
    except FileNotFoundError:
        return []  # drained by another process meanwhile
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except ValueError:
            log.warning("spool file %s line %d is torn (crash mid-append); skipped", path.name, n)
    return records


def _move(conn: Connection, record: dict[str, Any]) -> bool:
    scope = Scope(str(record["tenant"]), str(record["user_id"]), str(record["agent_id"]))
    with conn:
        return outbox.enqueue_once(conn, str(record["job_id"]), scope, str(record["session_id"]),
                                   list(record["messages"]), float(record["at"]))  # fmt: skip


async def drain_periodically(spool: Spool, db: Database, interval_s: float, on_moved: Any = None) -> None:
    """Move spooled turns into the outbox whenever the database is reachable."""
    while True:
        try:
            if await asyncio.to_thread(spool.pending) and await spool.drain(db) and on_moved is not None:
                on_moved()
        except DatabaseUnavailable:
            pass  # still away; the turns stay on disk
        await asyncio.sleep(interval_s)
