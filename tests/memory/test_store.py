"""MemoryStore on each engine (an SQLite file, a Postgres schema), real FAISS, the hash embedder."""

from __future__ import annotations

import asyncio
import time

import pytest

from memproxy.errors import ApiError
from memproxy.index.embedder import HashEmbedder
from memproxy.memory.rows import DuplicateMemory, normalize_text
from memproxy.scope import Scope
from memproxy.storage.engine import Connection
from tests.support.storage_env import Storage, all_bytes, open_store

ALICE = Scope("tenant-a", "alice", "")
BOB_OTHER_TENANT = Scope("tenant-b", "alice", "")

FILLER = [
    "Alice prefers window seats on long flights",
    "Her sister is called Maria and lives in Lisbon",
    "Alice is allergic to peanuts",
    "She runs every Tuesday morning before work",
    "Favourite programming language is Rust",
    "She drives a blue hatchback",
    "Alice works as a nurse at the city hospital",
    "Wants to learn Japanese next year",
    "Her cat is named Pixel",
    "She dislikes horror movies",
]


def test_add_get_and_api_shape(storage: Storage) -> None:
    async def body() -> None:
        async with open_store(storage) as store:
            memory = await store.add(ALICE, "  Likes green tea  ", session_id="s1", metadata={"k": 1})
            got = (await store.get("tenant-a", memory.id)).to_api()
            assert got["text"] == "Likes green tea" and got["metadata"] == {"k": 1}
            assert got["user_id"] == "alice" and got["agent_id"] == "" and got["session_id"] == "s1"
            assert got["source"] == "manual" and got["expires_at"] is None
            assert got["created_at"].endswith("Z") and got["created_at"] == got["updated_at"]

    asyncio.run(body())


def test_exact_duplicates_are_rejected_by_the_database(storage: Storage) -> None:
    assert normalize_text("  I live in   BERLIN!! ") == "i live in berlin"

    async def body() -> None:
        async with open_store(storage) as store:
            first = await store.add(ALICE, "I live in Berlin.")
            for variant in ("i live in berlin", "I  LIVE in Berlin!", " I live in\tBerlin? "):
                with pytest.raises(DuplicateMemory) as caught:
                    await store.add(ALICE, variant)
                assert caught.value.existing_id == first.id and caught.value.status == 409
            await store.add(Scope("tenant-a", "alice", "agent-x"), "I live in Berlin.")  # other scope: fine
            second = await store.add(ALICE, "I lived in Berlin")
            with pytest.raises(DuplicateMemory):
                await store.update("tenant-a", second.id, text="I LIVE IN BERLIN")
            page, _ = await store.list_memories("tenant-a", "alice", "")
            assert len(page) == 2

    asyncio.run(body())


def test_keyword_only_match_is_found(storage: Storage) -> None:
    query = "when will the delivery of zx-4471 arrive at the house"

    async def body() -> None:
        async with open_store(storage) as store:
            for text in FILLER:
                await store.add(ALICE, text)
            for i in range(40):  # paraphrases of the query's other words crowd the vector side
                await store.add(ALICE, f"When will the delivery number {i} arrive at the house")
            target = await store.add(ALICE, "Replacement part ordered: ZX-4471")
            vector = (await store.embedder.embed([query]))[0]
            found = await store.index.search(ALICE, vector, query, 10, keep=10)
            assert target.num not in [num for num, _ in found.vector]  # vectors alone miss it
            results = await store.search(ALICE, query, top_k=3)
            assert results[0][0].id == target.id
            assert 0.0 < results[0][1] <= 1.0
            assert results[0][1] >= max(score for _, score in results)  # the rank order leads with it
            assert await store.search(ALICE, query, top_k=3, min_score=0.99) == []

    asyncio.run(body())


def test_expired_memories_are_invisible(storage: Storage) -> None:
    async def body() -> None:
        async with open_store(storage) as store:
            clock = [time.time()]
            store.clock = lambda: clock[0]
            memory = await store.add(ALICE, "Temporary code word flamingo", expires_at=clock[0] + 60)
            assert (await store.search(ALICE, "flamingo"))[0][0].id == memory.id
            clock[0] += 61
            with pytest.raises(ApiError) as caught:
                await store.get("tenant-a", memory.id)
            assert caught.value.status == 404
            assert (await store.list_memories("tenant-a", "alice", None))[0] == []
            assert await store.search(ALICE, "flamingo") == []
            assert await store.export("tenant-a", "alice", None) == []
            again = await store.add(ALICE, "Temporary code word flamingo")  # expired does not block
            assert again.id != memory.id

    asyncio.run(body())


def test_update_writes_history_and_old_text_is_not_found(storage: Storage) -> None:
    async def body() -> None:
        async with open_store(storage) as store:
            for text in FILLER:
                await store.add(ALICE, text)
            memory = await store.add(ALICE, "Favourite fruit is mango")
            assert (await store.search(ALICE, "mango"))[0][0].id == memory.id
            updated = await store.update(
                "tenant-a", memory.id, text="Favourite fruit is papaya", metadata={"v": 2}
            )
            assert updated.text == "Favourite fruit is papaya" and updated.metadata == {"v": 2}
            assert all("mango" not in m.text for m, _ in await store.search(ALICE, "mango"))
            assert (await store.search(ALICE, "papaya"))[0][0].id == memory.id
            events = await store.history("tenant-a", memory.id)
            assert [e["event"] for e in events] == ["ADD", "UPDATE"]
            assert events[1]["old_text"] == "Favourite fruit is mango"
            assert events[1]["new_text"] == "Favourite fruit is papaya"
            kept = await store.update("tenant-a", memory.id, expires_at=None)
            assert kept.text == "Favourite fruit is papaya"

    asyncio.run(body())


def test_delete_hides_everywhere_but_keeps_history(storage: Storage) -> None:
    async def body() -> None:
        async with open_store(storage) as store:
            memory = await store.add(ALICE, "Parking spot number 42B")
            await store.search(ALICE, "parking")  # load the index first
            await store.delete("tenant-a", memory.id)
            assert await store.search(ALICE, "parking spot 42B") == []
            for call in (store.get("tenant-a", memory.id), store.delete("tenant-a", memory.id)):
                with pytest.raises(ApiError):
                    await call
            events = await store.history("tenant-a", memory.id)
            assert [e["event"] for e in events] == ["ADD", "DELETE"]

    asyncio.run(body())


def test_other_tenant_sees_and_changes_nothing(storage: Storage) -> None:
    async def body() -> None:
        async with open_store(storage) as store:
            memory = await store.add(ALICE, "Secret project codename Bluebird")
            other = "tenant-b"
            for call in (
                store.get(other, memory.id),
                store.update(other, memory.id, text="hijacked"),
                store.delete(other, memory.id),
                store.history(other, memory.id),
            ):
                with pytest.raises(ApiError) as caught:
                    await call
                assert caught.value.status == 404
            assert (await store.list_memories(other, None, None))[0] == []
            assert await store.search(BOB_OTHER_TENANT, "bluebird") == []
            assert await store.export(other, None, None) == []
            counts = await store.forget_scope(BOB_OTHER_TENANT)
            assert counts["memories"] == 0
            assert (await store.get("tenant-a", memory.id)).text == "Secret project codename Bluebird"

    asyncio.run(body())


def test_list_pagination_with_cursor(storage: Storage) -> None:
    async def body() -> None:
        async with open_store(storage) as store:
            ids = [(await store.add(ALICE, f"fact number {i}")).id for i in range(25)]
            await store.add(Scope("tenant-a", "bob", ""), "not alice")
            seen, cursor, pages = [], None, 0
            while True:
                page, cursor = await store.list_memories("tenant-a", "alice", None, limit=10, cursor=cursor)
                seen += [m.id for m in page]
                pages += 1
                if cursor is None:
                    break
            assert seen == ids and pages == 3
            everyone, _ = await store.list_memories("tenant-a", None, None, limit=100)
            assert len(everyone) == 26
            with pytest.raises(ApiError) as caught:
                await store.list_memories("tenant-a", "alice", None, cursor="!!garbage")
            assert caught.value.status == 400

    asyncio.run(body())


def _add_message_and_job(conn: Connection, scope: Scope, marker: str) -> None:
    with conn:
        conn.execute(
            "INSERT INTO messages (tenant, scope_key, user_id, role, content, created_at) VALUES (?, ?, ?, 'user', ?, 0)",
            (scope.tenant, scope.key, scope.user_id, f'{{"content": "{marker}"}}'),
        )
        conn.execute(
            "INSERT INTO jobs (id, tenant, scope_key, status, last_error, created_at, updated_at) "
            "VALUES ('job1', ?, ?, 'pending', ?, 0, 0)",
            (scope.tenant, scope.key, marker),
        )


def _rows_mentioning(conn: Connection, marker: str) -> int:
    found = 0
    for table, column in (("memories", "text"), ("history", "new_text"), ("messages", "content"),
                          ("jobs", "last_error")):  # fmt: skip
        found += conn.execute(
            f"SELECT count(*) FROM {table} WHERE {column} LIKE ?", (f"%{marker}%",)
        ).fetchone()[0]
    return int(found)


def test_forget_leaves_no_trace_under_the_data_dir(storage: Storage) -> None:
    marker = "qzxv-marker-7731"
    other = Scope("tenant-a", "carol", "")

    async def body() -> dict[str, int]:
        async with open_store(storage) as store:
            for text in FILLER:
                await store.add(other, text)
            memory = await store.add(ALICE, f"The vault code is {marker}")
            await store.update("tenant-a", memory.id, text=f"The vault code is still {marker}")
            await store.add(ALICE, f"{marker} is also the name of the wifi network")
            await store.db.run(lambda c: _add_message_and_job(c, ALICE, marker))
            assert await store.search(ALICE, marker) and await store.search(other, "peanuts")
            assert await store.index.snapshot_dirty() == 2
            if storage.engine == "sqlite":
                assert any(marker.encode() in data for data in all_bytes(storage.data_dir).values())
            assert await store.db.run(lambda c: _rows_mentioning(c, marker)) > 0
            counts = await store.forget_scope(ALICE)
            for path, data in all_bytes(storage.data_dir).items():  # still open: WAL truncated already
                assert marker.encode() not in data, path
            assert await store.db.run(lambda c: _rows_mentioning(c, marker)) == 0
            assert await store.search(ALICE, marker) == []
            assert (await store.search(other, "peanuts"))[0][0].text == "Alice is allergic to peanuts"
            return counts

    counts = asyncio.run(body())
    # index_entries: the vectors the loaded index held for the scope (both memories were searched).
    assert counts == {"memories": 2, "history": 3, "messages": 1, "jobs": 1, "changes": 3, "index_entries": 2}
    for path, data in all_bytes(storage.data_dir).items():
        assert marker.encode() not in data, path


def test_export_import_round_trip(storage: Storage) -> None:
    async def body() -> None:
        async with open_store(storage) as store:
            await store.add(ALICE, "Likes jazz", metadata={"tag": "music"}, expires_at=time.time() + 3600)
            await store.add(ALICE, "Speaks Portuguese", session_id="s9")
            exported = await store.export("tenant-a", "alice", "")
            await store.forget_scope(ALICE)
            result = await store.import_("tenant-a", [dict(row) for row in exported])
            assert result == {"imported": 2, "skipped": 0}
            assert await store.export("tenant-a", "alice", "") == exported
            assert (await store.import_("tenant-a", [dict(row) for row in exported]))["skipped"] == 2
            # The same ids imported by another tenant get fresh ids; nothing of tenant-a changes.
            theirs = await store.import_("tenant-b", [dict(row) for row in exported])
            assert theirs["imported"] == 2
            assert {m["id"] for m in await store.export("tenant-b", None, None)}.isdisjoint(
                {m["id"] for m in exported}
            )
            assert (await store.search(ALICE, "portuguese"))[0][0].text == "Speaks Portuguese"

    asyncio.run(body())


def test_changed_embedder_reembeds_and_stays_searchable(storage: Storage) -> None:
    async def body() -> None:
        async with open_store(storage, embedder=HashEmbedder(256)) as store:
            for text in FILLER:
                await store.add(ALICE, text)
            assert await store.search(ALICE, "peanuts")
        async with open_store(storage, embedder=HashEmbedder(128)) as store:
            assert await store.stale_count() == len(FILLER)
            hit = (await store.search(ALICE, "peanuts"))[0]  # lexical only meanwhile
            assert hit[0].text == "Alice is allergic to peanuts"
            assert await store.reembed_stale(batch=3) == len(FILLER)
            assert await store.stale_count() == 0
            vector_only = await store.search(ALICE, "peanut allergy")
            assert vector_only[0][0].text == "Alice is allergic to peanuts"

    asyncio.run(body())
