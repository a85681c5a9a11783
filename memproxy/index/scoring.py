"""Hybrid search scoring: fuse vector and BM25 candidates, then score them absolutely.

How a search works (``MemoryStore.search`` orchestrates it):
1. The query is embedded; the scope's FAISS index yields ``top_k * CANDIDATE_FACTOR``
   nearest vectors and its BM25 index as many keyword matches.
2. The two ranked lists are fused with reciprocal rank fusion,
   ``rrf(d) = sum over lists of 1 / (RRF_K + rank_d)`` with ``RRF_K = 60`` (the constant
   from Cormack et al. 2009: large enough that one list's top rank does not drown the
   other's); the best ``top_k * POOL_FACTOR`` by RRF plus the best ``top_k`` of each list
   are hydrated from SQLite by num. That drops anything deleted or expired since the
   index saw it.
3. Each hydrated memory gets an absolute **score** in [0, 1]:
   ``score = 1 - (1 - v) * (1 - l)`` (a probabilistic OR), where
   ``v = max(0, cosine(query, memory))`` from its stored vector (0 if it has none in the
   current embedding space) and ``l`` is the IDF-weighted share of the query's indexed
   terms the memory contains. So a memory matching a rare exact keyword (a product code,
   a name) scores high even when the vectors disagree, and a paraphrase scores its cosine.
4. Results with ``score < min_score`` are dropped; the rest are returned by score, best
   first (RRF breaks ties). ``min_score`` is therefore an absolute relevance floor:
   0 keeps every candidate, ~0.3 drops weak matches, 1 only exact matches.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from memproxy.index.lexical import tokenize

RRF_K = 60
CANDIDATE_FACTOR = 4
POOL_FACTOR = 3
MIN_CANDIDATES = 20


def candidate_count(top_k: int) -> int:
    return max(MIN_CANDIDATES, top_k * CANDIDATE_FACTOR)


def rrf_fuse(*ranked_lists: list[tuple[int, float]], k: int = RRF_K) -> dict[int, float]:
    """Reciprocal rank fusion of lists of ``(num, score)``, each best first."""
    fused: dict[int, float] = {}
    for ranked in ranked_lists:
        for rank, (num, _score) in enumerate(ranked, start=1):
            fused[num] = fused.get(num, 0.0) + 1.0 / (k + rank)
    return fused


def top_fused(fused: dict[int, float], limit: int) -> list[int]:
    return sorted(fused, key=lambda num: (-fused[num], num))[:limit]


def candidate_pool(
    vector_hits: list[tuple[int, float]], lexical_hits: list[tuple[int, float]], top_k: int
) -> tuple[list[int], dict[int, float]]:
    """The nums worth hydrating and scoring, plus their RRF scores.

    The best ``top_k`` of *each* list always get in: RRF alone favours items that are
    mediocre in both lists over the single best keyword match (a product code that only
    BM25 sees ranks below forty near-paraphrases that both lists see). RRF fills the rest.
    """
    fused = rrf_fuse(vector_hits, lexical_hits)
    heads = [num for num, _ in lexical_hits[:top_k]] + [num for num, _ in vector_hits[:top_k]]
    pool = list(dict.fromkeys(heads + top_fused(fused, top_k * POOL_FACTOR)))
    return pool, fused


def term_coverage(text: str, term_idf: dict[str, float]) -> float:
    """IDF-weighted fraction of the query terms (``term_idf``) present in ``text``."""
    total = sum(term_idf.values())
    if total <= 0:
        return 0.0
    present = set(tokenize(text))
    return sum(idf for term, idf in term_idf.items() if term in present) / total


def cosine(query: npt.NDArray[np.float32] | None, blob: bytes | None) -> float:
    """Cosine of two unit vectors; 0 when the memory has no vector in the query's space."""
    if query is None or blob is None or len(blob) != query.size * 4:
        return 0.0
    vector = np.frombuffer(blob, dtype=np.float32)
    return max(0.0, float(np.dot(query.reshape(-1), vector)))


def combine(vector_score: float, lexical_score: float) -> float:
    """Probabilistic OR: either signal alone can make a memory relevant."""
    v = min(max(vector_score, 0.0), 1.0)
    lex = min(max(lexical_score, 0.0), 1.0)
    return 1.0 - (1.0 - v) * (1.0 - lex)
