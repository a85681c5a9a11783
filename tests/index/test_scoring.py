"""The evidence gate and scores of hybrid search, through the real store (SQLite, FAISS, BM25)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import numpy as np
import pytest

from memproxy.index.embedder import Embedder, HashEmbedder, OnnxEmbedder
from memproxy.index.scoring import Ranking, above_floor, cosine, cosines, is_small_talk, relevance, relevances
from memproxy.scope import Scope
from tests.support.storage_env import open_store

SCOPE = Scope("tenant-a", "user-1", "")
MEMORIES = [
    "User's cat is called Biscuit.",
    "User lives in a flat in Lisbon.",
    "User is allergic to peanuts.",
    "Thanks, I'll use that for the booking form.",
    "Great, see you on Friday at the climbing gym!",
]
SMALL_TALK = [
    "hi",
    "Hello!",
    "thanks!",
    "thank you so much",
    "ok",
    "good morning",
    "great, thanks a lot",
    "see you later",
]


def search_all(tmp_path: Path, embedder: Embedder, queries: list[str], min_score: float,
               ranking: Ranking | None = None) -> dict[str, list[tuple[str, float]]]:  # fmt: skip
    async def run() -> dict[str, list[tuple[str, float]]]:
        async with open_store(tmp_path, embedder=embedder) as store:
            if ranking is not None:
                store.ranking = ranking
            for text in MEMORIES:
                await store.add(SCOPE, text)
            return {q: [(m.text, s) for m, s in await store.search(SCOPE, q, 8, min_score)] for q in queries}

    return asyncio.run(run())


@pytest.mark.parametrize("kind", ["hash", "onnx"])
def test_small_talk_recalls_nothing_even_at_min_score_zero(
    tmp_path: Path, kind: str, minilm: OnnxEmbedder
) -> None:
    embedder = minilm if kind == "onnx" else HashEmbedder(256)
    found = search_all(tmp_path, embedder, SMALL_TALK, min_score=0.0)
    assert found == {q: [] for q in SMALL_TALK}
    # The legacy scoring (no gate) injected every memory for "hi".
    legacy = search_all(tmp_path / "legacy", embedder, ["hi"], 0.0, Ranking.legacy())
    assert len(legacy["hi"]) == len(MEMORIES)


@pytest.mark.parametrize("kind", ["hash", "onnx"])
def test_lexical_matches_are_kept_and_unrelated_memories_dropped(
    tmp_path: Path, kind: str, minilm: OnnxEmbedder
) -> None:
    embedder = minilm if kind == "onnx" else HashEmbedder(256)
    found = search_all(tmp_path, embedder, ["what's my cat's name?", "ZX-4471 peanuts?"], min_score=0.1)
    texts = [text for text, _ in found["what's my cat's name?"]]
    assert texts[0] == "User's cat is called Biscuit."
    assert "User is allergic to peanuts." not in texts  # no shared term, no shared meaning
    assert found["ZX-4471 peanuts?"][0][0] == "User is allergic to peanuts."


def test_semantic_match_without_a_shared_word(tmp_path: Path, minilm: OnnxEmbedder) -> None:
    found = search_all(tmp_path, minilm, ["which city is my home?", "what is my kitty named?"], min_score=0.1)
    assert found["which city is my home?"][0][0] == "User lives in a flat in Lisbon."
    assert found["what is my kitty named?"][0][0] == "User's cat is called Biscuit."
    assert all(text != "User's cat is called Biscuit." for text, _ in found["which city is my home?"])


def test_small_talk_detection_keeps_questions() -> None:
    assert all(is_small_talk(q) for q in [*SMALL_TALK, "", "?!"])
    for question in ["ok, what is my job?", "hey, where do I live?", "thanks! and my cat's name?"]:
        assert not is_small_talk(question)


def test_scores_are_measured_from_the_embedders_floor() -> None:
    assert above_floor(0.185, 0.185) == 0.0 and above_floor(1.0, 0.185) == 1.0
    assert above_floor(0.5925, 0.185) == pytest.approx(0.5)
    assert relevance(0.1, 0.0, floor=0.185) is None  # no evidence at all
    assert relevance(0.1, 0.5, floor=0.185) == pytest.approx(0.5)  # lexical evidence alone
    assert relevance(0.6, 0.0, floor=0.2) == pytest.approx(0.5)  # semantic evidence alone
    assert relevance(0.1, 0.0, floor=0.185, ranking=Ranking.legacy()) == pytest.approx(0.1)


def test_a_word_counts_up_to_its_stem(tmp_path: Path) -> None:
    found = search_all(tmp_path, HashEmbedder(256), ["where do I live?", "cats"], min_score=0.1)
    assert [text for text, _ in found["where do I live?"]] == ["User lives in a flat in Lisbon."]
    assert [text for text, _ in found["cats"]] == ["User's cat is called Biscuit."]


def test_cosines_match_one_by_one_and_skip_vectors_of_another_space() -> None:
    rng = np.random.default_rng(7)
    query = rng.standard_normal(8).astype(np.float32)
    query /= np.linalg.norm(query)
    rows = [rng.standard_normal(8).astype(np.float32) for _ in range(5)]
    blobs: list[bytes | None] = [(row / np.linalg.norm(row)).tobytes() for row in rows]
    blobs += [None, np.ones(4, dtype=np.float32).tobytes()]  # no vector; another embedder's size
    assert cosines(query, blobs) == pytest.approx([cosine(query, blob) for blob in blobs])
    assert cosines(query, blobs)[-2:] == [0.0, 0.0]
    assert cosines(None, blobs) == [0.0] * len(blobs)
    assert all(value >= 0.0 for value in cosines(query, blobs))


@pytest.mark.parametrize(
    "ranking",
    [Ranking(), Ranking(gate=False), Ranking(rescale=False), Ranking(lexical_weight=0.5)],
)
@pytest.mark.parametrize("floor", [0.0, 0.185, 0.8, 1.0])
def test_relevances_of_many_equal_relevance_of_each(ranking: Ranking, floor: float) -> None:
    rng = random.Random(11)
    cos = [rng.choice([0.0, floor, 1.0, rng.uniform(-0.2, 1.0)]) for _ in range(200)]
    lexical = [rng.choice([0.0, 1.0, rng.uniform(0.0, 1.0)]) for _ in range(200)]
    assert relevances(cos, lexical, floor, ranking) == [
        relevance(c, lex, floor, ranking) for c, lex in zip(cos, lexical, strict=True)
    ]
    assert relevances([], [], floor, ranking) == []
