"""The second hop: names in the best results bring in the memories that continue them."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

from memproxy.index import bridges
from memproxy.index.embedder import Embedder, HashEmbedder, OnnxEmbedder
from memproxy.index.scoring import default_ranking
from memproxy.scope import Scope
from tests.support.storage_env import open_store

SCOPE = Scope("tenant-a", "user-1", "")
OTHER_USER = Scope("tenant-a", "user-2", "")
OTHER_TENANT = Scope("tenant-b", "user-1", "")
PARTNER = "My partner Tiago is a firefighter."
PROMOTION = "Tiago got a promotion at the Alfama fire station."
HAYSTACK = [
    "Can you give me a quick recipe for banana bread?",
    "At work I'm leading the migration of the patient records system.",
    "My friend Kofi's partner is a civil engineer.",
    "Is it worth buying an electric car these days?",
    "We booked flights to Japan for April!",
    "How do I center a div in CSS?",
]
QUESTION = "Where does my partner work?"


def test_bridge_terms_are_capitalized_rare_and_not_asked() -> None:
    text = "I sold the Renault Clio and bought a Tesla in Lisbon."
    assert bridges.capitalized_terms(text) == ["renault", "clio", "tesla", "lisbon"]  # "I": a stopword
    doc_freq = {"renault": 2, "clio": 3, "tesla": 1, "lisbon": 9}
    # tesla: in this memory only (nothing to follow); lisbon: a topic of many memories.
    assert bridges.bridge_terms(text, "which car did I have?", doc_freq, 100) == ["renault", "clio"]
    # A name the question already has is searched by the first hop, not followed.
    assert bridges.bridge_terms(text, "what did I do with the Renault?", doc_freq, 100) == ["clio"]
    # In a small scope a word in 3 of 5 memories (the "User" of extracted memories) is no name.
    assert bridges.bridge_terms(text, "which car did I have?", doc_freq, 5) == ["renault"]


def test_a_bridged_memory_never_outranks_its_source() -> None:
    assert bridges.bridged_score(0.6, None) == pytest.approx(0.6 * bridges.DECAY)
    assert bridges.bridged_score(0.6, 0.1) == pytest.approx(0.6 * bridges.DECAY)
    assert bridges.bridged_score(0.6, 0.9) == 0.6


def search(tmp_path: Path, embedder: Embedder, *, with_bridges: bool) -> list[list[str]]:
    async def run() -> list[list[str]]:
        async with open_store(tmp_path, embedder=embedder) as store:
            store.ranking = replace(default_ranking(embedder.identity), bridges=with_bridges)
            for text in [PARTNER, PROMOTION, *HAYSTACK]:
                await store.add(SCOPE, text)
            # The same name in another user's and another tenant's memories: never followed there.
            await store.add(OTHER_USER, "Tiago is my landlord.")
            await store.add(OTHER_TENANT, "Tiago sold his flat in Porto.")
            found = [[m.text for m, _ in await store.search(SCOPE, QUESTION, 4, 0.1)]]
            for scope in (OTHER_USER, OTHER_TENANT):
                found.append([m.text for m, _ in await store.search(scope, "who is Tiago?", 8, 0.0)])
            return found

    return asyncio.run(run())


@pytest.mark.parametrize("kind", ["hash", "onnx"])
def test_the_answer_follows_the_memory_that_names_it(tmp_path: Path, kind: str, minilm: OnnxEmbedder) -> None:
    embedder = minilm if kind == "onnx" else HashEmbedder(256)
    one_hop, *_ = search(tmp_path / "one", embedder, with_bridges=False)
    assert PARTNER in one_hop and PROMOTION not in one_hop  # the question never names Tiago
    two_hops, other_user, other_tenant = search(tmp_path / "two", embedder, with_bridges=True)
    assert PROMOTION in two_hops
    assert two_hops.index(PROMOTION) == two_hops.index(PARTNER) + 1  # right behind its source
    assert other_user == ["Tiago is my landlord."]
    assert other_tenant == ["Tiago sold his flat in Porto."]
