"""Context fusion: a memory is ranked by its own evidence and by the memory before it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np

from memproxy.index.embedder import OnnxEmbedder
from memproxy.index.fusion import _cosines
from memproxy.index.lexical import LexicalIndex
from memproxy.index.vectors import VectorSet
from memproxy.scope import Scope
from tests.support.storage_env import open_store

SCOPE = Scope("tenant", "caroline", "")

CONVERSATION = [
    "Melanie: How was the weekend? Did the kids enjoy the beach?",
    "Caroline: They loved it, we built a huge sandcastle.",
    "Melanie: What have you been researching lately for the family plans?",
    "Caroline: Adoption agencies, mostly. I found two that support single parents.",
    "Melanie: That's wonderful news, good luck with it!",
    "Caroline: I also started pottery classes on Tuesdays.",
    "Melanie: My dog Luna chewed my favourite shoes again.",
    "Caroline: I am going to a support group meeting on Friday.",
]


def test_an_answer_is_found_through_the_question_before_it(tmp_path: Path, minilm: OnnxEmbedder) -> None:
    async def body() -> list[str]:
        async with open_store(tmp_path, embedder=minilm) as store:
            for text in CONVERSATION:
                await store.add(SCOPE, text)
            return [m.text for m, _ in await store.search(SCOPE, "What did Caroline research?", 3, 0.0)]

    found = asyncio.run(body())
    # The answer shares no word with the question but "Caroline"; the turn before it asked.
    assert CONVERSATION[3] in found[:2]
    assert CONVERSATION[2] in found[:2]


def test_joined_cosine_is_the_cosine_of_the_normalised_sum() -> None:
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((6, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    query = rng.standard_normal(16).astype(np.float32)
    query /= np.linalg.norm(query)
    lexical = LexicalIndex()
    vset = VectorSet(16)
    nums = [10, 11, 12, 13, 14, 15]
    for num in nums:
        lexical.add(num, f"memory {num}")
    vset.add(nums[:5], vectors[:5])  # 15 has no vector: it scores 0 and its join is its own
    scores = lexical.score_all("memory")
    slots = np.asarray([scores.slot_of[num] for num in nums], dtype=np.int64)
    own, joined, related = _cosines(scores, slots, vset, query, 0.1)
    for i in range(5):
        assert abs(own[i] - float(vectors[i] @ query)) < 2e-3  # fp16 copies in the scan
        if i == 0:
            assert joined[i] == own[i]  # the first memory has no context
            continue
        assert related[i] == (float(vectors[i] @ vectors[i - 1]) > 0.1)
        summed = vectors[i] + vectors[i - 1]
        assert abs(joined[i] - float(summed @ query) / float(np.linalg.norm(summed))) < 2e-3
    assert own[5] == 0.0 and joined[5] == 0.0
    again_own, again_joined, _ = _cosines(scores, slots, vset, query, 0.1)  # the pair cache answers
    assert np.array_equal(again_own, own) and np.array_equal(again_joined, joined)
