"""Per-scope search indexes (FAISS vectors + BM25), derived from the database (SQLite or Postgres).

Invariants:
- The database commits first; every memory write also appends to ``changes`` in the same
  transaction. The index is derived state and can always be rebuilt from the database.
- A loaded scope records ``seq``, the last ``changes.seq`` it reflects. Before every
  search, ``max(seq)`` of the scope is read (an indexed lookup) and any newer changes are
  replayed from the database. So the index agrees with it even when another process wrote,
  or the process died between a commit and a snapshot.
- Only vectors of the current embedder identity enter FAISS; every memory's text enters
  BM25, so rows awaiting re-embedding are still found lexically.
- Snapshots are ``<data_dir>/index/<scope_key>.faiss`` (a hash, never raw ids), written
  to a temp file in the same directory, fsynced and ``os.replace``d. They carry format
  version, embedder identity, dim and seq, and a sha256 over header and payload; a
  missing, stale or corrupt snapshot is rebuilt from the database (and logged).
- Several processes may share the data dir (``serve --workers N``, ``memproxy worker``):
  each catches up from the change log, snapshot temp names are unique per writer and the
  rename is atomic, so the last writer wins with a whole, self-consistent file (an older
  seq only means more replay at load); ``drop_forgotten`` deletes a snapshot older than a
  forget made through another process.
- Per-scope ``asyncio.Lock`` serializes mutation and search of one scope; FAISS work
  that can be big runs in a worker thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import numpy.typing as npt

from memproxy.config import IndexSettings
from memproxy.index import snapshot as snapshot_file
from memproxy.index.bridges import bridge_terms, capitalized_terms
from memproxy.index.changelog import (
    Row,
    blob_vectors,
    max_seq,
    read_changes,
    read_scope_rows,
    resets_after,
)
from memproxy.index.embedder import Embedder
from memproxy.index.fusion import best, fuse
from memproxy.index.lexical import LexicalIndex
from memproxy.index.rowcache import RowCache
from memproxy.index.snapshot import SnapshotError
from memproxy.index.vectors import VectorSet, new_index
from memproxy.scope import Scope
from memproxy.storage.database import RESET_MARKER_NUM

log = logging.getLogger(__name__)

# Replays of more changes than this are applied in a thread instead of inline.
_INLINE_REPLAY_MAX = 32
# Even empty scopes cost memory (BM25 arrays, locks); bound how many stay loaded.
MAX_LOADED_SCOPES = 20_000
# Exact searches over more vectors than this go to a thread (see bench/recall.py).
_INLINE_SEARCH_MAX = 20_000


@dataclass
class LoadedScope:
    scope: Scope
    lexical: LexicalIndex
    vectors: VectorSet | None
    seq: int
    snapshot_seq: int = -1
    dropped: bool = False  # forgotten: must never be written to disk again
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    rows: RowCache = field(default_factory=RowCache)  # rows as of ``seq`` (``memproxy.index.rowcache``)
    epoch: int = 0  # bumped by a reset: a seq means the same state only within one epoch

    @property
    def dirty(self) -> bool:
        return self.seq != self.snapshot_seq

    @property
    def held_vectors(self) -> int:
        return self.vectors.total if self.vectors is not None else 0


@dataclass
class Candidates:
    vector: list[tuple[int, float]]  # (num, cosine), best first
    ranked: list[int]  # the best nums by context fusion (``memproxy.index.fusion``), best first
    fused: dict[int, float]  # their fused scores (only theirs)
    term_idf: dict[str, float]  # IDF of the query terms known to the scope
    seq: int = 0  # the change seq the index reflected when it was searched
    rows: dict[int, object] = field(default_factory=dict)  # cached rows of hit nums, as of ``seq``
    epoch: int = 0


class IndexManager:
    def __init__(self, db: Any, data_dir: Path, embedder: Embedder, settings: IndexSettings) -> None:
        self.db = db
        self.dir = Path(data_dir) / "index"
        self.embedder = embedder
        self.settings = settings
        self._scopes: OrderedDict[str, LoadedScope] = OrderedDict()
        self._loading: dict[str, asyncio.Lock] = {}
        self._resets_seen = 0  # newest forget marker ``drop_forgotten`` has acted on

    @property
    def identity(self) -> str:
        return self.embedder.identity

    def snapshot_path(self, scope_key: str) -> Path:
        return self.dir / f"{scope_key}.faiss"

    def loaded_scopes(self) -> int:
        return len(self._scopes)

    def held_vectors(self) -> int:
        return sum(entry.held_vectors for entry in self._scopes.values())

    async def search(
        self,
        scope: Scope,
        vector: npt.NDArray[np.float32] | None,
        query: str,
        k: int,
        *,
        keep: int,
        catch_up: bool = True,
    ) -> Candidates:
        """The ``keep`` best nums of a scope by context fusion of ``k`` vector candidates and
        every BM25 score (``memproxy.index.fusion``), after catching up.

        ``catch_up=False`` searches the index as it is and reports the change seq it reflects
        (``Candidates.seq``): a caller that reads ``latest_seq`` in the same database round
        trip as its results saves one round trip per search, and searches again (caught up)
        in the rare case the two differ."""
        entry = await self._get(scope)
        async with entry.lock:
            if catch_up:
                await self._catch_up(entry)
            vectors = entry.vectors
            vec_hits: list[tuple[int, float]] = []
            if vector is not None and vectors is not None:
                if vectors.total > _INLINE_SEARCH_MAX:
                    vec_hits = await asyncio.to_thread(vectors.search, vector, k)
                else:
                    vec_hits = vectors.search(vector, k)
            pool = fuse(entry.lexical.score_all(query), vec_hits, vectors, vector, k, self.embedder.floor)
            fused = best(pool, keep)
            ranked = list(fused)
            term_idf = entry.lexical.term_idf(query)
            cached = entry.rows.pick(ranked)
            return Candidates(vec_hits, ranked, fused, term_idf, entry.seq, cached, entry.epoch)

    def remember_rows(self, scope: Scope, found: Candidates, seq: int, rows: dict[int, object]) -> None:
        """Cache rows read at change ``seq`` for a search that returned ``found``, if they are
        exactly what the index reflects now (same seq and epoch, and no catch-up under way,
        which could be dropping these nums in a thread); otherwise they are not kept."""
        entry = self._scopes.get(scope.key)
        if (entry is None or entry.dropped or entry.lock.locked() or entry.epoch != found.epoch
                or not entry.seq == seq == found.seq):  # fmt: skip
            return
        entry.rows.put(rows)

    async def follow_bridges(self, scope: Scope, query: str, sources: list[str], k: int) -> list[list[int]]:
        """For each source text, up to ``k`` nums sharing its bridge terms (``memproxy.index.bridges``).

        Runs on the index as the search that found the sources left it (no catch-up): what
        it returns is hydrated, so a memory deleted since is dropped there."""
        entry = await self._get(scope)
        async with entry.lock:
            followed: list[list[int]] = []
            for text in sources:
                doc_freq = entry.lexical.doc_freq(" ".join(capitalized_terms(text)))
                terms = bridge_terms(text, query, doc_freq, len(entry.lexical))
                # k + 1: the source itself contains every one of its terms.
                hits = entry.lexical.search(" ".join(terms), k + 1) if terms else []
                followed.append([num for num, _ in hits])
        return followed

    async def sync(self, scope: Scope) -> LoadedScope:
        """Load the scope if needed and replay the change log into it."""
        entry = await self._get(scope)
        async with entry.lock:
            await self._catch_up(entry)
        return entry

    async def snapshot(self, scope: Scope | str) -> bool:
        """Write the scope's snapshot if it changed since the last one; True if written."""
        key = scope if isinstance(scope, str) else scope.key
        entry = self._scopes.get(key)
        if entry is None:
            return False
        async with entry.lock:  # held while writing, so drop_scope cannot interleave
            if entry.dropped:
                return False
            # Catch up first: a scope forgotten meanwhile is reset here, so forgotten
            # entries can never reach the disk.
            await self._catch_up(entry)
            if not entry.dirty:
                return False
            if not len(entry.lexical):
                # Nothing to save (a forgotten or emptied scope): no file names a scope
                # that holds no memory, and rebuilding an empty scope costs nothing.
                await asyncio.to_thread(self._delete_files, key)
                entry.snapshot_seq = entry.seq
                return False
            payload = await asyncio.to_thread(self._encode, entry)
            await asyncio.to_thread(snapshot_file.write_atomic, self.snapshot_path(key), payload)
            entry.snapshot_seq = entry.seq
        return True

    async def snapshot_dirty(self) -> int:
        written = 0
        for key in list(self._scopes):
            if await self.snapshot(key):
                written += 1
        return written

    async def drop_scope(self, scope: Scope | str) -> int:
        """Unload a scope and delete its snapshot files (used by forget). Returns how many
        vectors this process held for it (superseded ones included): what forget erased here."""
        key = scope if isinstance(scope, str) else scope.key
        entry = self._scopes.pop(key, None)
        erased = 0
        if entry is not None:
            async with entry.lock:
                erased = entry.held_vectors
                entry.dropped = True
                entry.vectors, entry.lexical = None, LexicalIndex()
                entry.rows.clear()
                await asyncio.to_thread(self._delete_files, key)
        else:
            await asyncio.to_thread(self._delete_files, key)
        return erased

    async def drop_forgotten(self) -> int:
        """Unload scopes forgotten through another process (replica, worker, operator tool)
        since the last call, and delete their snapshot files, so no copy of a forgotten
        memory stays on this replica's disk. A snapshot written after the forget is kept.
        Returns how many scopes were dropped."""
        after = self._resets_seen
        resets = await self.db.run(lambda c: resets_after(c, after))
        dropped = 0
        for scope_key, seq in resets:
            self._resets_seen = max(self._resets_seen, seq)
            entry = self._scopes.get(scope_key)
            if entry is not None:
                if entry.seq < seq:  # not caught up: still holds forgotten entries
                    await self.drop_scope(scope_key)
                    dropped += 1
                continue
            path = self.snapshot_path(scope_key)
            snapshot_seq = await asyncio.to_thread(snapshot_file.read_seq, path)
            if snapshot_seq is not None and snapshot_seq < seq:
                await asyncio.to_thread(self._delete_files, scope_key)
                dropped += 1
        if dropped:
            log.info("dropped the index of %d scope(s) forgotten elsewhere", dropped)
        return dropped

    async def rebuild(self, scope: Scope) -> LoadedScope:
        """Discard the in-memory and on-disk index of a scope and rebuild it from the database."""
        await self.drop_scope(scope)
        entry = await self._get(scope)
        await self.snapshot(scope)
        return entry

    async def unload(self, scope: Scope | str, *, snapshot: bool = True) -> None:
        """Drop a scope from memory (after snapshotting it, unless told not to)."""
        key = scope if isinstance(scope, str) else scope.key
        if snapshot:
            await self.snapshot(key)
        self._scopes.pop(key, None)

    async def _get(self, scope: Scope) -> LoadedScope:
        entry = self._scopes.get(scope.key)
        if entry is None:
            lock = self._loading.setdefault(scope.key, asyncio.Lock())
            async with lock:
                entry = self._scopes.get(scope.key)
                if entry is None:
                    entry = await self._load(scope)
                    self._scopes[scope.key] = entry
            self._loading.pop(scope.key, None)
            await self._evict(keep=scope.key)
        self._scopes.move_to_end(scope.key)
        return entry

    async def _load(self, scope: Scope) -> LoadedScope:
        path = self.snapshot_path(scope.key)
        started = time.perf_counter()
        try:
            entry = await asyncio.to_thread(self._decode_file, scope, path)
            log.debug("loaded index snapshot of scope %s (seq %d)", scope.key[:12], entry.seq)
            return entry
        except FileNotFoundError:
            reason = "no snapshot"
        except (SnapshotError, ValueError, OSError, RuntimeError, KeyError) as exc:
            reason = f"unusable snapshot ({exc})"
        seq, rows = await self.db.run(lambda c: read_scope_rows(c, scope, self.identity))
        entry = await asyncio.to_thread(self._build, scope, seq, rows)
        # A scope without memories or snapshot is simply new: not worth an INFO line.
        level = logging.DEBUG if not rows and reason == "no snapshot" else logging.INFO
        log.log(
            level, "rebuilt index of scope %s from the database: %s; %d memories in %.0f ms",
            scope.key[:12], reason, len(rows), (time.perf_counter() - started) * 1000,
        )  # fmt: skip
        return entry

    def _dim(self, rows: list[Row]) -> int:
        if self.embedder.dim:
            return self.embedder.dim
        return next((len(r.embedding) // 4 for r in rows if r.embedding), 0)

    def _build(self, scope: Scope, seq: int, rows: list[Row]) -> LoadedScope:
        lexical = LexicalIndex()
        for row in rows:
            lexical.add(row.num, row.text or "")
        dim = self._dim(rows)
        vectors = None
        if dim:
            nums, matrix = blob_vectors(rows, dim)
            vectors = VectorSet(dim, hnsw=len(nums) > self.settings.hnsw_threshold)
            vectors.add(nums, matrix)
        return LoadedScope(scope, lexical, vectors, seq)

    async def _catch_up(self, entry: LoadedScope) -> None:
        """Replay changes after ``entry.seq``; caller holds ``entry.lock``."""
        scope = entry.scope
        latest = await self.db.run(lambda c: max_seq(c, scope))
        if latest == entry.seq:
            return
        seq, rows = await self.db.run(lambda c: read_changes(c, scope, entry.seq, self.identity))
        if latest < entry.seq or any(r.num == RESET_MARKER_NUM for r in rows):
            await self._reset(entry)
            return
        if len(rows) > _INLINE_REPLAY_MAX:
            await asyncio.to_thread(self._apply, entry, rows)
        else:
            self._apply(entry, rows)
        vectors = entry.vectors
        wants_hnsw = vectors is not None and len(vectors) > self.settings.hnsw_threshold
        if vectors is not None and (vectors.needs_compaction() or wants_hnsw != vectors.hnsw):
            # Off the loop: re-adding every live vector takes seconds at the HNSW threshold.
            entry.vectors = await asyncio.to_thread(vectors.compact, wants_hnsw)
        entry.seq = max(seq, entry.seq)

    async def _reset(self, entry: LoadedScope) -> None:
        """The scope was forgotten elsewhere: rebuild from the database, drop the old snapshot."""
        scope = entry.scope
        seq, rows = await self.db.run(lambda c: read_scope_rows(c, scope, self.identity))
        fresh = await asyncio.to_thread(self._build, scope, seq, rows)
        entry.lexical, entry.vectors, entry.seq = fresh.lexical, fresh.vectors, seq
        entry.rows.clear()
        entry.epoch += 1
        entry.snapshot_seq = -1
        await asyncio.to_thread(self._delete_files, scope.key)
        log.info("scope %s was forgotten elsewhere; index rebuilt", scope.key[:12])

    def _apply(self, entry: LoadedScope, rows: list[Row]) -> None:
        entry.rows.drop(row.num for row in rows)
        for row in rows:
            if row.text is None:
                entry.lexical.remove(row.num)
            else:
                entry.lexical.add(row.num, row.text)
        dim = entry.vectors.dim if entry.vectors is not None else self._dim(rows)
        if not dim:
            return
        if entry.vectors is None:
            entry.vectors = VectorSet(dim)
        for row in rows:
            entry.vectors.remove(row.num)  # gone, or re-embedded by another embedder
        nums, matrix = blob_vectors(rows, dim)
        entry.vectors.add(nums, matrix)

    async def _evict(self, keep: str) -> None:
        """Unload least-recently-used scopes while over ``max_loaded_vectors`` (or too many scopes)."""
        while len(self._scopes) > 1 and (
            self.held_vectors() > self.settings.max_loaded_vectors or len(self._scopes) > MAX_LOADED_SCOPES
        ):
            key = next(iter(self._scopes))
            if key == keep:
                self._scopes.move_to_end(key)
                key = next(iter(self._scopes))
            await self.unload(key)  # snapshots first, so reloading it is cheap
            log.info("unloaded index of scope %s (memory bound)", key[:12])

    def _encode(self, entry: LoadedScope) -> list[bytes | memoryview]:
        arrays = dict(entry.lexical.to_arrays())
        dim, kind = 0, "none"
        vectors = entry.vectors
        if vectors is not None:
            if vectors.needs_compaction():
                entry.vectors = vectors = vectors.compact()
            dim, kind = vectors.dim, "hnsw" if vectors.hnsw else "flat"
            arrays["vec_nums"] = vectors.nums
            if vectors.hnsw:  # the graph is costly to rebuild: keep FAISS's own encoding
                arrays["faiss"] = faiss.serialize_index(vectors.index)
            else:  # the fp16 rows, exactly as the scan holds them
                arrays["vectors"] = (
                    vectors.index.reconstruct_n(0, vectors.total).reshape(-1, dim).astype(np.float16)
                )
        header = {"identity": self.identity, "dim": dim, "kind": kind, "seq": entry.seq,
                  "scope_key": entry.scope.key}  # fmt: skip
        return snapshot_file.encode(header, arrays)

    def _decode_file(self, scope: Scope, path: Path) -> LoadedScope:
        return snapshot_file.load(path, lambda *parts: self._from_snapshot(scope, *parts))

    def _from_snapshot(
        self,
        scope: Scope,
        header: dict[str, Any],
        arrays: snapshot_file.Arrays,
        wait_verified: Callable[[], None],
    ) -> LoadedScope:
        if header.get("scope_key") != scope.key:
            raise SnapshotError("snapshot of another scope")
        if header.get("identity") != self.identity:
            raise SnapshotError(f"embedder changed from {header.get('identity')}")
        dim = int(header["dim"])
        if self.embedder.dim and dim and dim != self.embedder.dim:
            raise SnapshotError("dimension changed")
        vectors = None
        if header["kind"] == "hnsw":
            wait_verified()  # FAISS's own parser is not safe on corrupt bytes
            index = faiss.deserialize_index(np.array(arrays["faiss"]))
            vectors = VectorSet(dim, True, index, arrays["vec_nums"])
        elif header["kind"] == "flat":
            index = new_index(dim, hnsw=False)  # fp16 codes; older snapshots hold float32 rows
            index.add(np.ascontiguousarray(arrays["vectors"], dtype=np.float32).reshape(-1, dim))
            vectors = VectorSet(dim, False, index, arrays["vec_nums"])
        lexical = LexicalIndex.from_arrays(arrays)
        seq = int(header["seq"])
        return LoadedScope(scope, lexical, vectors, seq, snapshot_seq=seq)

    def _delete_files(self, scope_key: str) -> None:
        if not self.dir.exists():
            return
        for path in self.dir.glob(f"{scope_key}.faiss*"):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
