"""VectorSet: the fp16 scan ranks like exact float32; tombstones and compaction."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

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
