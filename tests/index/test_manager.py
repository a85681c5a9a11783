"""IndexManager: snapshots, corruption, crash catch-up, other writers, HNSW, LRU."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memproxy.config import IndexSettings
from memproxy.index import snapshot as snapshot_file
from memproxy.index.embedder import HashEmbedder
from memproxy.index.manager import IndexManager
from memproxy.memory.rows import delete_memory, insert_memory
from memproxy.memory.store import MemoryStore
from memproxy.scope import Scope
from memproxy.storage.database import SqliteDatabase as Database
from memproxy.storage.engine import SqliteConnection
from tests.support.storage_env import DB_NAME, all_bytes, open_store

SCOPE = Scope("tenant-a", "user-1", "agent-1")
QUERIES = ["coffee in the morning", "trip to kyoto", "item 117", "favourite colour", "dentist appointment"]
TOPICS = ["coffee", "kyoto", "colour", "dentist", "guitar", "python", "marathon", "garden", "piano", "sushi"]


def _texts(count: int, offset: int = 0) -> list[str]:
    return [
        f"item {i}: note about {TOPICS[i % len(TOPICS)]} and {TOPICS[(i * 7) % len(TOPICS)]} number {i}"
        for i in range(offset, offset + count)
    ]


async def _results(store: MemoryStore) -> list[list[tuple[str, float]]]:
    out = []
    for query in QUERIES:
        hits = await store.search(SCOPE, query, top_k=5)
        out.append([(m.id, round(score, 5)) for m, score in hits])
    return out


async def _fill(store: MemoryStore, count: int, offset: int = 0) -> None:
    for text in _texts(count, offset):
        await store.add(SCOPE, text)


async def _reopened_from_snapshot_gives(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, before: list[list[tuple[str, float]]]
) -> None:
    """A store reopened on ``tmp_path`` loads the snapshot (no rebuild) and finds ``before``."""
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="memproxy.index.manager"):
        async with open_store(tmp_path) as store:
            assert await _results(store) == before
    assert "rebuilt" not in caplog.text


def test_snapshot_round_trip_gives_identical_results(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def body() -> None:
        async with open_store(tmp_path) as store:
            await _fill(store, 200)
            before = await _results(store)
        snapshot = tmp_path / "index" / f"{SCOPE.key}.faiss"
        assert snapshot.exists() and "user-1" not in str(snapshot)
        await _reopened_from_snapshot_gives(tmp_path, caplog, before)

    asyncio.run(body())


def test_snapshots_hold_fp16_rows_and_float32_ones_still_load(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The scan holds fp16 codes, so snapshots store fp16 rows (half the bytes); a snapshot
    written before that, with float32 rows, still loads as it is and searches the same."""

    async def body() -> None:
        async with open_store(tmp_path) as store:
            await _fill(store, 200)
            before = await _results(store)
        path = tmp_path / "index" / f"{SCOPE.key}.faiss"
        header, arrays = snapshot_file.decode(path.read_bytes())
        assert arrays["vectors"].dtype == np.float16 and arrays["vectors"].shape == (200, 256)
        old = {**arrays, "vectors": arrays["vectors"].astype(np.float32)}
        snapshot_file.write_atomic(path, snapshot_file.encode(header, old))
        await _reopened_from_snapshot_gives(tmp_path, caplog, before)

    asyncio.run(body())


def test_corrupt_snapshot_is_detected_and_rebuilt(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def body() -> None:
        async with open_store(tmp_path) as store:
            await _fill(store, 120)
            before = await _results(store)
        snapshot = tmp_path / "index" / f"{SCOPE.key}.faiss"
        data = bytearray(snapshot.read_bytes())
        for pos in range(len(data) // 2, len(data) // 2 + 16):
            data[pos] ^= 0xFF
        snapshot.write_bytes(bytes(data))
        with caplog.at_level(logging.INFO, logger="memproxy.index.manager"):
            async with open_store(tmp_path) as store:
                assert await _results(store) == before
        assert "checksum mismatch" in caplog.text
        assert snapshot.read_bytes() != bytes(data)  # rewritten on close

    asyncio.run(body())


def _crash_writes(path: Path) -> tuple[str, str]:
    """Commit rows the way the worker does, with no index or snapshot involved."""
    raw = sqlite3.connect(path)
    conn = SqliteConnection(raw)
    now = time.time()
    with conn:
        added = insert_memory(conn, SCOPE, "late memory about the zeppelin museum", embedding=HashEmbedder(256)
                              .embed_sync(["late memory about the zeppelin museum"])[0],
                              embed_model="hash:256", source="extracted", now=now)  # fmt: skip
        victim = conn.execute("SELECT id FROM memories WHERE text LIKE 'item 3:%'").fetchone()[0]
        delete_memory(conn, SCOPE.tenant, victim, source="extracted", now=now)
    raw.close()
    return added.id, victim


def test_index_catches_up_from_the_change_log_after_a_crash(tmp_path: Path) -> None:
    async def body() -> None:
        async with open_store(tmp_path) as store:
            await _fill(store, 50)
            await _results(store)
        added, victim = _crash_writes(tmp_path / DB_NAME)  # committed after the snapshot
        async with open_store(tmp_path, snapshot_on_close=False) as store:
            hits = await store.search(SCOPE, "zeppelin museum", top_k=3)
            assert hits[0][0].id == added
            assert all(m.id != victim for m, _ in await store.search(SCOPE, "item 3", top_k=50))
            entry = await store.index.sync(SCOPE)
            assert entry.vectors is not None and len(entry.vectors) == 50 and len(entry.lexical) == 50

    asyncio.run(body())


def test_writes_by_another_process_are_seen_on_next_search(tmp_path: Path) -> None:
    async def body() -> None:
        async with open_store(tmp_path) as store:
            await _fill(store, 30)
            await store.search(SCOPE, "guitar")  # index loaded at the current seq
            other = Database(tmp_path / DB_NAME)  # its own connection, like the worker process
            await other.open()
            other_store = MemoryStore(other, HashEmbedder(256), IndexManager(
                other, tmp_path / "other", HashEmbedder(256), IndexSettings()))  # fmt: skip
            memory = await other_store.add(
                SCOPE, "The spare key is under the blue flowerpot", source="extracted"
            )
            assert (await store.search(SCOPE, "spare key flowerpot"))[0][0].id == memory.id
            await other_store.delete(SCOPE.tenant, memory.id, source="extracted")
            assert all(m.id != memory.id for m, _ in await store.search(SCOPE, "spare key flowerpot"))
            await other.close()

    asyncio.run(body())


def test_hnsw_above_threshold_supports_update_and_delete(tmp_path: Path) -> None:
    async def body() -> None:
        async with open_store(tmp_path, settings=IndexSettings(hnsw_threshold=40)) as store:
            await _fill(store, 60)
            entry = await store.index.sync(SCOPE)
            assert entry.vectors is not None and entry.vectors.hnsw
            target = (await store.search(SCOPE, "item 17", top_k=1))[0][0]
            await store.update(SCOPE.tenant, target.id, text="item 17 is now about zebras")
            assert (await store.search(SCOPE, "zebras", top_k=1))[0][0].id == target.id
            await store.delete(SCOPE.tenant, target.id)
            assert all(m.id != target.id for m, _ in await store.search(SCOPE, "item 17 zebras", top_k=10))
            before = await _results(store)
        async with open_store(tmp_path, settings=IndexSettings(hnsw_threshold=40)) as store:
            assert await _results(store) == before

    asyncio.run(body())


def test_least_recently_used_scopes_are_unloaded(tmp_path: Path) -> None:
    scopes = [Scope("tenant-a", f"user-{i}", "") for i in range(3)]

    async def body() -> None:
        async with open_store(tmp_path, settings=IndexSettings(max_loaded_vectors=100)) as store:
            for scope in scopes:
                for text in _texts(60):
                    await store.add(scope, text)
            for scope in scopes:
                assert await store.search(scope, "item 5")
                assert store.index.held_vectors() <= 100 or store.index.loaded_scopes() == 1
            assert store.index.loaded_scopes() == 1
            assert (await store.search(scopes[0], "item 5", top_k=1))[0][0].text.startswith("item 5:")

    asyncio.run(body())


def test_drop_scope_deletes_snapshot_and_rebuild_restores(tmp_path: Path) -> None:
    async def body() -> None:
        async with open_store(tmp_path) as store:
            await _fill(store, 20)
            before = await _results(store)
            await store.index.snapshot(SCOPE)
            snapshot = store.index.snapshot_path(SCOPE.key)
            assert snapshot.exists()
            await store.index.drop_scope(SCOPE)
            assert not snapshot.exists() and store.index.loaded_scopes() == 0
            await store.index.rebuild(SCOPE)
            assert snapshot.exists() and await _results(store) == before

    asyncio.run(body())


def test_snapshot_of_another_embedder_is_rebuilt(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def body() -> None:
        async with open_store(tmp_path, embedder=HashEmbedder(256)) as store:
            await _fill(store, 20)
            await _results(store)
        with caplog.at_level(logging.INFO, logger="memproxy.index.manager"):
            async with open_store(tmp_path, embedder=HashEmbedder(128)) as store:
                await store.reembed_stale()
                assert (await store.search(SCOPE, "item 11", top_k=1))[0][0].text.startswith("item 11:")
        assert "embedder changed" in caplog.text

    asyncio.run(body())


def test_scope_forgotten_by_another_process_is_reset(tmp_path: Path) -> None:
    marker = b"unique-okapi-5521"

    async def body() -> None:
        async with open_store(tmp_path) as store:
            await _fill(store, 10)
            await store.add(SCOPE, f"remember {marker.decode()}")
            assert await store.search(SCOPE, marker.decode())  # loaded in this process
            other = Database(tmp_path / DB_NAME)
            await other.open()
            other_store = MemoryStore(other, HashEmbedder(256), IndexManager(
                other, tmp_path, HashEmbedder(256), IndexSettings()))  # fmt: skip
            await other_store.forget_scope(SCOPE)
            await other.close()
            await store.index.snapshot_dirty()  # must not persist the forgotten entries
            assert await store.search(SCOPE, marker.decode()) == []
            entry = await store.index.sync(SCOPE)
            assert len(entry.lexical) == 0

    asyncio.run(body())
    for path, data in all_bytes(tmp_path).items():
        assert marker not in data, path


class CountingDatabase(Database):
    """The real SQLite database, counting round trips to its thread."""

    calls = 0

    async def run(self, fn: Any) -> Any:
        self.calls += 1
        return await super().run(fn)


def test_a_search_of_an_unchanged_scope_reads_only_rows_it_has_not_read(tmp_path: Path) -> None:
    async def body() -> None:
        db = CountingDatabase(tmp_path / DB_NAME)
        await db.open()
        store = MemoryStore(
            db, HashEmbedder(256), IndexManager(db, tmp_path, HashEmbedder(256), IndexSettings())
        )
        await store.start()
        await _fill(store, 30)
        await store.search(SCOPE, "guitar")
        db.calls = 0
        first = await store.search(SCOPE, "guitar lessons")
        assert first and db.calls == 2  # the change seq (beside the index search), then new rows
        db.calls = 0
        assert await store.search(SCOPE, "guitar lessons") == first
        assert db.calls == 1  # every row cached as of the index's seq: only the seq is read
        other = Database(tmp_path / DB_NAME)
        await other.open()
        await MemoryStore(other, HashEmbedder(256), IndexManager(
            other, tmp_path / "other", HashEmbedder(256), IndexSettings())).add(SCOPE, "Guitar strings are nylon")  # fmt: skip
        db.calls = 0
        assert "Guitar strings are nylon" in [m.text for m, _ in await store.search(SCOPE, "guitar strings")]
        assert db.calls > 2  # the scope changed elsewhere: caught up, then searched again
        await other.close()
        await db.close()

    asyncio.run(body())


def test_a_cached_row_changed_or_deleted_by_another_process_is_not_served(tmp_path: Path) -> None:
    """Rows cached beside the index are dropped when the change log says their memory
    changed: an update or delete made through another process shows on the next search."""

    async def body() -> None:
        async with open_store(tmp_path) as store:
            await _fill(store, 30)
            kept = await store.add(SCOPE, "The spare key is under the blue flowerpot")
            gone = await store.add(SCOPE, "The spare bike lock code is 4411")
            for _ in range(2):  # the second search is served from the row cache
                found = {m.id: m.text for m, _ in await store.search(SCOPE, "spare key bike lock")}
                assert kept.id in found and gone.id in found
            other = Database(tmp_path / DB_NAME)
            await other.open()
            other_store = MemoryStore(other, HashEmbedder(256), IndexManager(
                other, tmp_path / "other", HashEmbedder(256), IndexSettings()))  # fmt: skip
            await other_store.update(SCOPE.tenant, kept.id, text="The spare key is under the red flowerpot")
            await other_store.delete(SCOPE.tenant, gone.id)
            await other.close()
            found = {m.id: m.text for m, _ in await store.search(SCOPE, "spare key bike lock")}
            assert found.get(kept.id) == "The spare key is under the red flowerpot"
            assert gone.id not in found

    asyncio.run(body())
