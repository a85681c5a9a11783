"""The similarity floor: a high quantile of cosines between unrelated queries and facts."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from memproxy.index.calibration import FLOOR_QUANTILE, UNRELATED_FACTS, UNRELATED_QUERIES, measure_floor
from memproxy.index.embedders.base import Embedder, Vectors, normalize_rows
from memproxy.index.embedders.hashed import HASH_FLOOR, HashEmbedder


class Recording:
    """An embedder whose vectors are chosen per call (queries vs memories); records the calls."""

    identity = "fake:3"
    dim = 3
    floor = 0.0
    loaded = True

    def __init__(self, query: list[float], memory: list[float]) -> None:
        self.vectors = {True: query, False: memory}
        self.calls: list[tuple[list[str], bool]] = []

    async def load(self) -> None:
        return None

    async def embed(self, texts: list[str], *, query: bool = False) -> Vectors:
        self.calls.append((texts, query))
        return normalize_rows(np.array([self.vectors[query]] * len(texts), dtype=np.float32))


def floor(embedder: Embedder, quantile: float = FLOOR_QUANTILE) -> float:
    return asyncio.run(measure_floor(embedder, quantile))


def test_queries_are_embedded_as_queries_and_facts_as_memories() -> None:
    embedder = Recording([1, 0, 0], [1, 0, 0])
    floor(embedder)
    assert embedder.calls == [(list(UNRELATED_QUERIES), True), (list(UNRELATED_FACTS), False)]


@pytest.mark.parametrize(
    ("query", "memory", "expected"),
    [([1, 0, 0], [1, 0, 0], 1.0), ([1, 0, 0], [0, 1, 0], 0.0), ([1, 0, 0], [-1, 0, 0], -1.0),
     ([1, 1, 0], [1, 0, 0], 2**-0.5)],
)  # fmt: skip
def test_the_floor_is_the_cosine_in_the_embedders_own_space(
    query: list[float], memory: list[float], expected: float
) -> None:
    assert floor(Recording(query, memory)) == pytest.approx(expected, abs=1e-6)


def test_the_quantile_orders_the_floor_and_one_is_the_highest_unrelated_cosine() -> None:
    embedder = HashEmbedder()
    low, mid, default, top = (floor(embedder, q) for q in (0.0, 0.5, FLOOR_QUANTILE, 1.0))
    assert low <= mid <= default <= top <= 1.0
    queries = embedder.embed_sync(list(UNRELATED_QUERIES))
    facts = embedder.embed_sync(list(UNRELATED_FACTS))
    assert top == pytest.approx(float((queries @ facts.T).max()), abs=1e-6)


def test_the_hash_embedders_constant_floor_is_what_calibration_measures() -> None:
    measured = floor(HashEmbedder())
    assert 0.0 < measured < 0.5
    assert HASH_FLOOR == pytest.approx(measured, abs=0.05)  # re-measure when the features change


def test_a_related_pair_clears_the_floor() -> None:
    embedder = HashEmbedder()
    query, fact = embedder.embed_sync(["what is my cat called", "User's cat is named Biscuit."])
    assert float(query @ fact) > floor(embedder)


def test_the_sets_are_disjoint_and_big_enough_for_a_high_quantile() -> None:
    assert not set(UNRELATED_QUERIES) & set(UNRELATED_FACTS)
    assert len(set(UNRELATED_QUERIES)) == len(UNRELATED_QUERIES)
    assert len(set(UNRELATED_FACTS)) == len(UNRELATED_FACTS)
    # 98th percentile of at least 500 pairs: above the top ten, not the single worst pair.
    assert len(UNRELATED_QUERIES) * len(UNRELATED_FACTS) * (1 - FLOOR_QUANTILE) >= 10
