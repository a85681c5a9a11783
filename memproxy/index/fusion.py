"""Context fusion: the order a search's candidates are ranked in.

A memory is rarely complete on its own in a conversation: "Adoption agencies." answers the
turn before it, and "I went there last week" needs the turn that named the place. So every
candidate is judged twice, alone and joined with its *context* (the live memory just before
it in num order, ``memproxy.index.lexical``), by both signals:

    fused = z(BM25 own) + z(cos own) + CONTEXT_WEIGHT * (z(BM25 joined) + z(cos joined))

- BM25 z-scores are exact: mean and spread over every live memory of the scope (the
  lexical index scores them all in a few array operations).
- Cosine z-scores are taken over the candidate pool (the vector index returns only its
  nearest ``k``; a full scan for exact statistics cost 2 ms more per search at 10k
  memories). The joined cosine needs no second embedding: the joined vector is the
  normalised sum of the two unit vectors, so ``cos(q, v+p) = (q.v + q.p) / |v+p|``.
- z-scores make the two signals comparable whatever the embedder: no per-model weights.
- A context counts only when it is related to the memory: their cosine above the
  embedder's ``floor`` (what unrelated text reaches, ``memproxy.index.calibration``). The
  turns of a dialogue are (LoCoMo dev: 90% of adjacent turns above 0.30); a list of
  unrelated facts, what extraction usually stores, is not, and there a neighbour's words
  only add noise. An unrelated or missing context leaves the memory judged alone.

Fitted on LoCoMo dev (bench/retrieval_quality.py --locomo; offline replica, R@1/10/25):
RRF of the old ranking 27.4/62.2/73.2; 1:1 z fusion of own scores 31.3/65.3/72.6; with
stems and BM25 (0.9, 0.3) 37.3/69.7/77.3; with the context at 0.7: 38.3/76.1/83.8 (0.5:
38.3/75.5/83.5, 0.9: 37.6/76.4/83.8). The pool: 100 per list gave what 200 gave. Through
the API: the context unconditional 38.1/76.0/83.8, only when related (the floor)
38.4/75.1/83.6, and the generated set's R@1/10 46.6/93.1 -> 49.5/94.8 (its memories
alternate a user's fact and an unrelated reply), the hard set's 34.5/82.8 -> 36.6/83.8.

Invariants: pure functions of the index's state for one query; nothing here touches the
database, and every num returned is live in the lexical index.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from memproxy.index.lexical import LexicalScores
from memproxy.index.vectors import VectorSet

_EMPTY = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64))
CONTEXT_WEIGHT = 0.7
MIN_POOL = 100


def pool_size(top_k: int) -> int:
    """Candidates taken from each list (the vector index, BM25 alone, BM25 joined)."""
    return max(MIN_POOL, 4 * top_k)


def _z(values: npt.NDArray[np.float64], over: npt.NDArray[np.bool_] | None = None) -> npt.NDArray[np.float64]:
    sample = values if over is None else values[over]
    if sample.size == 0:
        return np.zeros_like(values)
    spread = float(sample.std())
    return (values - float(sample.mean())) / (spread if spread > 1e-9 else 1.0)


def _top(values: npt.NDArray[np.float32], alive: npt.NDArray[np.bool_], k: int) -> npt.NDArray[np.int64]:
    hits = np.flatnonzero(alive & (values > 0))
    if len(hits) > k:
        hits = hits[np.argpartition(-values[hits], k - 1)[:k]]
    return hits.astype(np.int64)


def fuse(
    lexical: LexicalScores,
    vector_hits: list[tuple[int, float]],
    vectors: VectorSet | None,
    query: npt.NDArray[np.float32] | None,
    pool: int,
    floor: float,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """The candidate pool's nums and their fused scores (see the module docstring).

    ``floor`` is the embedder's cosine on unrelated text: a context whose vector is not above
    it from the memory's is unrelated, and the memory is judged alone (joined = own)."""
    n = len(lexical.nums)
    if n == 0:
        return _EMPTY
    alive, slot_of = lexical.alive, lexical.slot_of
    vector_slots = np.asarray([slot_of[num] for num, _ in vector_hits if num in slot_of], dtype=np.int64)
    following = np.full(n, -1, dtype=np.int64)  # the slot whose context each slot is
    has_prev = lexical.prev >= 0
    following[lexical.prev[has_prev]] = np.flatnonzero(has_prev)
    after_vector = following[vector_slots] if len(vector_slots) else vector_slots
    slots = np.unique(np.concatenate([
        vector_slots, after_vector[after_vector >= 0],
        _top(lexical.own, alive, pool), _top(lexical.context, alive, pool),
    ]))  # fmt: skip
    if len(slots) == 0:
        return _EMPTY
    own = lexical.own.astype(np.float64)
    joined = lexical.context.astype(np.float64)
    z_own, z_joined = _z(own, alive)[slots], _z(joined, alive)[slots]
    if vectors is not None and query is not None and len(vectors):
        cos_own, cos_joined, related = _cosines(lexical, slots, vectors, query, floor)
        z_joined = np.where(related, z_joined, z_own)
        cos_joined = np.where(related, cos_joined, cos_own)
        score = z_own + _z(cos_own) + CONTEXT_WEIGHT * (z_joined + _z(cos_joined))
    else:
        score = z_own + CONTEXT_WEIGHT * z_joined
    return lexical.nums[slots], score


def best(pool: tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]], keep: int) -> dict[int, float]:
    """The ``keep`` best of a fused pool, ``{num: fused score}`` best first (ties: lower num)."""
    nums, scores = pool
    order = np.lexsort((nums, -scores))[:keep]
    return dict(zip(nums[order].tolist(), scores[order].tolist(), strict=True))


def _cosines(
    lexical: LexicalScores,
    slots: npt.NDArray[np.int64],
    vectors: VectorSet,
    query: npt.NDArray[np.float32],
    floor: float,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """Cosine of each slot's vector, and of its vector joined with its context's, to ``query``,
    and whether its context is related to it (their cosine above ``floor``).

    ``cos(q, v+p) = (q.v + q.p) / |v+p|`` and ``|v+p|^2 = 2 + 2 v.p`` for unit vectors, so
    the join needs the inner products of the query with both, and of the two with each
    other (``VectorSet.inner_products``, ``VectorSet.pair_products``). A memory without a
    vector scores 0 alone and contributes nothing to a join."""
    prev = lexical.prev[slots]
    own_ids = vectors.internal_ids(lexical.nums[slots])
    prev_ids = np.where(prev >= 0, vectors.internal_ids(lexical.nums[np.maximum(prev, 0)]), -1)
    wanted = np.unique(np.concatenate([own_ids[own_ids >= 0], prev_ids[prev_ids >= 0]]))
    products = vectors.inner_products(query, wanted)

    def dots(ids: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        out = np.zeros(len(ids), dtype=np.float64)
        have = ids >= 0
        out[have] = products[np.searchsorted(wanted, ids[have])]
        return out

    own, before = dots(own_ids), dots(prev_ids)
    joined = own.copy()
    related = np.zeros(len(slots), dtype=bool)
    pair = (own_ids >= 0) & (prev_ids >= 0)
    if pair.any():
        vp = vectors.pair_products(own_ids[pair], prev_ids[pair])
        joined[pair] = (own[pair] + before[pair]) / np.sqrt(np.maximum(2.0 + 2.0 * vp, 1e-12))
        related[pair] = vp > floor
    return own, joined, related
