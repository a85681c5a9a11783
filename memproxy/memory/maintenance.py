"""Operator tools that work on the data dir directly: reindex, export, import.

Invariants:
- They open the same SQLite file the server uses (WAL: safe while it runs) and build
  the store from the same config, so the embedder identity matches the server's.
- ``reindex`` rebuilds from SQLite only (the source of truth): it first re-embeds rows
  of another embedder, then for each scope drops the in-memory and on-disk index,
  rebuilds it and writes a fresh snapshot (recording the change seq it reflects, so a
  running server that loads it still replays anything newer). With no ``--scope`` it
  also deletes snapshot files of scopes that no longer hold any memory.
- ``import`` re-embeds every text with the configured embedder (vectors are never part
  of an export), so it calls the embedding provider when that is ``litellm``.
- Commands that only read (``export``, ``tenants``), ``reindex`` and ``import`` never create a data
  dir: with no database at ``storage.data_dir`` they raise ``OperatorError`` naming the
  path, instead of silently making an empty one and reporting nothing.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Any, TextIO

from memproxy.config import Settings
from memproxy.memory.store import MemoryStore, open_store
from memproxy.memory.transfer import read_jsonl, to_jsonl
from memproxy.scope import Scope
from memproxy.storage.database import database_path
from memproxy.storage.engine import Connection

SCOPE_KEY = re.compile(r"^[0-9a-f]{64}$")
_BAR_WIDTH = 30


class OperatorError(Exception):
    """A problem the operator can fix (bad argument, bad input line)."""


class ProgressBar:
    """A plain text bar on stderr: redrawn in place on a terminal, one line per 10% otherwise."""

    def __init__(self, total: int, label: str, stream: TextIO | None = None) -> None:
        self.total = max(total, 0)
        self.label = label
        self.stream = stream or sys.stderr
        self.done = 0
        self._last_decile = -1
        self._tty = self.stream.isatty()

    def advance(self, amount: int, note: str = "") -> None:
        self.done = min(self.total, self.done + amount)
        fraction = self.done / self.total if self.total else 1.0
        decile = int(fraction * 10)
        if not self._tty and decile == self._last_decile and self.done < self.total:
            return
        self._last_decile = decile
        filled = int(fraction * _BAR_WIDTH)
        line = f"{self.label} [{'#' * filled}{'.' * (_BAR_WIDTH - filled)}] {fraction:4.0%} {note}".rstrip()
        self.stream.write(("\r" + line) if self._tty else line + "\n")
        self.stream.flush()

    def finish(self) -> None:
        if self._tty:
            self.stream.write("\n")
            self.stream.flush()


@dataclass
class ReindexResult:
    scopes: int
    memories: int
    reembedded: int
    orphan_snapshots_removed: int


def _scopes(conn: Connection, scope_key: str | None) -> list[tuple[Scope, int]]:
    sql = "SELECT tenant, user_id, agent_id, count(*) FROM memories"
    params: tuple[Any, ...] = ()
    if scope_key is not None:
        sql += " WHERE scope_key = ?"
        params = (scope_key,)
    rows = conn.execute(
        sql + " GROUP BY scope_key, tenant, user_id, agent_id ORDER BY min(num)", params
    ).fetchall()
    return [(Scope(r[0], r[1], r[2]), int(r[3])) for r in rows]


async def reindex(
    settings: Settings, scope_key: str | None = None, stream: TextIO | None = None
) -> ReindexResult:
    if scope_key is not None and not SCOPE_KEY.match(scope_key):
        raise OperatorError(
            "--scope must be a scope key: 64 lowercase hex characters (a snapshot file's name)"
        )
    require_database(settings)
    async with open_store(settings) as store:
        reembedded = await store.reembed_stale()
        scopes = await store.db.run(lambda c: _scopes(c, scope_key))
        total = sum(count for _, count in scopes)
        bar = ProgressBar(total, "reindex", stream)
        for n, (scope, count) in enumerate(scopes, start=1):
            await store.index.rebuild(scope)
            bar.advance(count, f"{n}/{len(scopes)} scopes, {bar.done + count}/{total} memories")
        if not scopes:
            bar.advance(0, "0 scopes")
        bar.finish()
        removed = 0
        if scope_key is not None and not scopes:
            await store.index.drop_scope(scope_key)  # a scope without memories: no snapshot either
        elif scope_key is None:
            removed = await _remove_orphan_snapshots(store, {scope.key for scope, _ in scopes})
    return ReindexResult(len(scopes), total, reembedded, removed)


async def _remove_orphan_snapshots(store: MemoryStore, live: set[str]) -> int:
    directory = store.index.dir
    if not directory.exists():
        return 0
    keys = {path.name.split(".", 1)[0] for path in directory.iterdir()}
    orphans = {key for key in keys if SCOPE_KEY.match(key) and key not in live}
    for key in orphans:
        await store.index.drop_scope(key)
    return len(orphans)


def require_database(settings: Settings) -> None:
    """Refuse to work on a data dir that holds no memproxy database (see module invariants).
    With ``storage.url`` the database is Postgres (checked when it is opened)."""
    if settings.storage.url:
        return
    path = database_path(settings.storage.data_dir)
    if not path.is_file():
        raise OperatorError(
            f"no memproxy database at {path} (storage.data_dir is {settings.storage.data_dir}); "
            "nothing was created. Point --config, $MEMPROXY_CONFIG or MEMPROXY_STORAGE__DATA_DIR "
            "at the server's data dir."
        )


async def tenant_counts(settings: Settings) -> list[tuple[str, int]]:
    """Every tenant with memories, and how many it has (most first)."""
    require_database(settings)
    sql = "SELECT tenant, count(*) FROM memories GROUP BY tenant ORDER BY count(*) DESC, tenant"
    async with open_store(settings) as store:
        rows = await store.db.run(lambda c: c.execute(sql).fetchall())
    return [(str(r[0]), int(r[1])) for r in rows]


async def export_jsonl(
    settings: Settings, tenant: str, user_id: str | None, agent_id: str | None
) -> tuple[bytes, int]:
    """The selected memories as JSON Lines, and how many there are."""
    require_database(settings)
    async with open_store(settings) as store:
        items = await store.export(tenant, user_id, agent_id)
    return to_jsonl(items), len(items)


async def import_jsonl(
    settings: Settings, tenant: str, raw: bytes, stream: TextIO | None = None
) -> dict[str, int]:
    """All or nothing (``MemoryStore.import_``): bad lines raise ``ImportRefused`` listing
    each by file line; the embedding, the slow part, draws a progress bar on ``stream``."""
    require_database(settings)
    items, bad_lines = read_jsonl(raw)
    async with open_store(settings) as store:
        bar = ProgressBar(len(items), "import", stream)
        result = await store.import_(
            tenant, items, lambda n: bar.advance(n, f"{bar.done + n}/{len(items)} memories"), bad_lines
        )
        if not items:
            bar.advance(0, "0 memories")
        bar.finish()
        return result
