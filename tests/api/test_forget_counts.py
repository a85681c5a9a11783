"""``DELETE /v1/memories?user_id=`` reports what the forget erased, each count measured
(issue 24 finding 8: ``index_entries`` used to be a copy of the memory count)."""

from __future__ import annotations

import uuid

import httpx

from tests.support.proxy import Proxy


def _scope_with_two_memories(http: httpx.Client) -> tuple[str, list[str]]:
    user = "forget-" + uuid.uuid4().hex[:10]
    ids = []
    for text in ("Plays the cello on Sundays", "Grows tomatoes on the balcony"):
        created = http.post("/v1/memories", json={"user_id": user, "text": text})
        assert created.status_code == 201, created.text
        ids.append(created.json()["id"])
    return user, ids


def test_index_entries_are_the_vectors_the_index_held_not_the_memory_count(proxy: Proxy) -> None:
    with proxy.http("sk-forget-" + uuid.uuid4().hex) as http:
        # Never searched: this process never loaded the scope's index, so forget erased no entry.
        cold, _ = _scope_with_two_memories(http)
        deleted = http.delete("/v1/memories", params={"user_id": cold}).json()["deleted"]
        assert (deleted["memories"], deleted["index_entries"]) == (2, 0)

        # Searched, then one memory rewritten: the index holds both vectors of the rewritten
        # one (the old is superseded, still an embedding of its text) beside the other's.
        warm, ids = _scope_with_two_memories(http)
        assert http.post("/v1/memories/search", json={"user_id": warm, "query": "cello"}).status_code == 200
        assert (
            http.patch(f"/v1/memories/{ids[0]}", json={"text": "Plays the viola on Sundays"}).status_code
            == 200
        )
        assert http.post("/v1/memories/search", json={"user_id": warm, "query": "viola"}).status_code == 200
        deleted = http.delete("/v1/memories", params={"user_id": warm}).json()["deleted"]
        assert (deleted["memories"], deleted["index_entries"]) == (2, 3)

        # Forgotten already: nothing left anywhere.
        again = http.delete("/v1/memories", params={"user_id": warm}).json()["deleted"]
        assert (again["memories"], again["index_entries"], again["snapshots"]) == (0, 0, 0)
