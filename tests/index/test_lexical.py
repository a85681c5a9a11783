"""BM25 index: ranking, removal, compaction, serialization, speed."""

from __future__ import annotations

import random

from memproxy.index.lexical import LexicalIndex, tokenize


def test_tokenize_lowercases_and_drops_stopwords() -> None:
    assert tokenize("The Café in ZX-4471, and Müller's") == ["café", "zx", "4471", "müller"]


def test_rare_term_ranks_first_and_removal_hides() -> None:
    index = LexicalIndex()
    index.add(1, "I like green tea in the morning")
    index.add(2, "Green is my favourite colour")
    index.add(3, "The replacement part is ZX-4471")
    hits = index.search("green tea", 10)
    assert [num for num, _ in hits][:1] == [1] and {n for n, _ in hits} == {1, 2}
    assert [n for n, _ in index.search("zx-4471", 5)] == [3]
    index.remove(3)
    assert index.search("zx-4471", 5) == []
    index.add(1, "coffee only")  # re-adding replaces the old text
    assert [n for n, _ in index.search("tea", 5)] == []
    assert len(index) == 2


def test_compaction_keeps_results() -> None:
    index = LexicalIndex()
    for num in range(1, 3001):
        index.add(num, f"memo number {num} about topic{num % 17}")
    for num in range(1, 2501):
        index.remove(num)
    assert len(index) == 500
    hits = index.search("topic3", 100)
    assert hits and all(num > 2500 and num % 17 == 3 for num, _ in hits)
    assert [n for n, _ in index.search("2999", 3)] == [2999]


def test_arrays_round_trip_gives_identical_results() -> None:
    index = LexicalIndex()
    rng = random.Random(7)
    words = [f"w{i}" for i in range(300)]
    for num in range(1, 800):
        index.add(num, " ".join(rng.choice(words) for _ in range(8)))
    for num in range(1, 800, 5):
        index.remove(num)
    copy = LexicalIndex.from_arrays(index.to_arrays())
    for query in ("w1 w2", "w17", "w250 w3 w99"):
        assert copy.search(query, 20) == index.search(query, 20)
    copy.add(5000, "w17 brand new")
    assert copy.search("brand", 1)[0][0] == 5000


def test_terms_are_stems_so_word_forms_match() -> None:
    index = LexicalIndex()
    index.add(1, "User works at Acme Corp")
    index.add(2, "User lives in Porto")
    index.add(3, "Caroline: Researching adoption agencies")
    assert [n for n, _ in index.search("where do I work?", 5)] == [1]
    assert [n for n, _ in index.search("where do I live", 5)] == [2]
    assert [n for n, _ in index.search("what did Caroline research", 5)] == [3]


def test_joined_scores_equal_an_index_of_the_joined_texts() -> None:
    rng = random.Random(11)
    words = [f"w{i}" for i in range(60)]
    texts = {num: " ".join(rng.choice(words) for _ in range(rng.randint(2, 9))) for num in range(1, 200)}
    index = LexicalIndex()
    for num in rng.sample(sorted(texts), len(texts)):  # slots in another order than nums
        index.add(num, texts[num])
    for num in range(3, 200, 7):
        index.remove(num)
        del texts[num]
    live = sorted(texts)
    joined = LexicalIndex()
    for before, num in zip([None, *live], live, strict=False):
        joined.add(num, texts[num] if before is None else texts[before] + " " + texts[num])
    for query in ("w1 w2", "w17", "w50 w3 w9 w33"):
        scores = index.score_all(query)
        reference = joined.score_all(query)
        for num in live:
            got = scores.context[scores.slot_of[num]]
            assert abs(got - reference.own[reference.slot_of[num]]) < 1e-4, (query, num)
            assert abs(scores.own[scores.slot_of[num]] - dict(index.search(query, 500)).get(num, 0.0)) < 1e-4
        first = scores.slot_of[live[0]]
        assert scores.prev[first] == -1 and scores.context[first] == scores.own[first]
