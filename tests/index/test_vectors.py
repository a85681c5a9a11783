"""VectorSet: the fp16 scan ranks like exact float32; tombstones and compaction."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from memproxy.index.vectors import VectorSet


def clustered(count: int, dim: int = 64, clusters: int = 40, seed: int = 3) -> npt.NDArray[np.float32]:
    """Unit vectors around ``clusters`` centres, like embeddings of a person's facts."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim))
    points = centres[rng.integers(0, clusters, count)] + 0.6 * rng.standard_normal((count, dim))
    points /= np.linalg.norm(points, axis=1, keepdims=True)
    return points.astype(np.float32)


def exact_top(vectors: npt.NDArray[np.float32], query: npt.NDArray[np.float32], k: int) -> list[int]:
    return [int(i) + 1 for i in np.argsort(-(vectors @ query))[:k]]  # nums are row + 1


def test_the_fp16_scan_ranks_like_exact_float32() -> None:
    vectors = clustered(2000)
    flat = VectorSet(64)
    flat.add(list(range(1, 2001)), vectors)
    rng = np.random.default_rng(5)
    for row in range(0, 2000, 97):
        query = vectors[row] + 0.3 * rng.standard_normal(64).astype(np.float32)
        query /= np.linalg.norm(query)
        hits = flat.search(query, 48)
        assert set(exact_top(vectors, query, 8)) <= {num for num, _ in hits}
        assert abs(hits[0][1] - float(vectors[hits[0][0] - 1] @ query)) < 2e-3


def test_tombstoned_vectors_are_never_returned_and_compaction_keeps_the_rest() -> None:
    vectors = clustered(600)
    flat = VectorSet(64)
    flat.add(list(range(1, 601)), vectors)
    for num in range(1, 601, 2):
        flat.remove(num)
    assert flat.needs_compaction()
    hits = flat.search(vectors[0], 20)  # row 0 is num 1: removed
    assert len(hits) == 20 and all(num % 2 == 0 for num, _ in hits)
    compacted = flat.compact()
    assert len(compacted) == 300 and compacted.dead == 0 and compacted.total == 300
    assert compacted.search(vectors[1], 1)[0][0] == 2


@pytest.mark.parametrize("hnsw", [False, True])
def test_products_of_chosen_ids_and_pairs_match_numpy_after_changes(hnsw: bool) -> None:
    rng = np.random.default_rng(5)
    data = rng.standard_normal((50, 16)).astype(np.float32)
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    vectors = VectorSet(16, hnsw=hnsw)
    vectors.add(list(range(100, 150)), data)
    vectors.remove(120)
    vectors.add([101], data[:1])  # replaced: a new internal id for num 101
    query = data[7]
    nums = np.asarray([107, 120, 101, 999, 149], dtype=np.int64)
    ids = vectors.internal_ids(nums)
    assert ids[1] == -1 and ids[3] == -1 and ids[2] == 50  # removed, unknown, replaced
    live = ids[ids >= 0]
    expected = {107: data[7] @ query, 101: data[0] @ query, 149: data[49] @ query}
    got = vectors.inner_products(query, live)
    assert got == pytest.approx([expected[107], expected[101], expected[149]], abs=2e-3)
    first, second = ids[[0, 4]], ids[[2, 2]]
    pairs = vectors.pair_products(first, second)
    assert pairs == pytest.approx([data[7] @ data[0], data[49] @ data[0]], abs=2e-3)
    assert np.array_equal(vectors.pair_products(first, second), pairs)  # kept, not re-read
