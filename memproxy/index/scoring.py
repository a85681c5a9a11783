"""Hybrid search scoring: gate candidates on evidence and give each an absolute score.

How a search works (``memproxy.memory.search`` orchestrates it):
1. The query is embedded (as a query); the scope's FAISS index yields its nearest vectors
   and BM25 scores every memory, alone and joined with the memory before it; the two are
   fused into the rank order (``memproxy.index.fusion``), and the best
   ``top_k * POOL_FACTOR`` are read from the database by num. That drops anything deleted
   or expired since the index saw it.
2. **Evidence gate.** A query made only of small talk ("hi", "thanks a lot", "good
   morning", "see you later": every indexed word is a greeting, thanks, acknowledgement,
   farewell or laughter word, ``SMALL_TALK``) searches nothing. Otherwise a memory is kept
   only if it shares an indexed term (a stem, ``memproxy.index.lexical.terms``) with the
   query (lexical evidence) or its cosine to the query is above the embedder's ``floor``
   (semantic evidence: above what unrelated text reaches in that space, see
   ``memproxy.index.calibration``). "hi" shares no term and no meaning with a memory, so
   nothing is recalled for it, whatever ``min_score`` says.
3. Each remaining memory gets an absolute **score** in [0, 1]:
   ``score = 1 - (1 - v) * (1 - l)`` (a probabilistic OR), where
   ``v = (cosine - floor) / (1 - floor)`` clipped to [0, 1] (the cosine above the noise
   level, so ``v`` means the same for every embedder) and ``l`` is the IDF-weighted share
   of the query's terms the memory contains ("live" in "User lives in Paris": terms are
   stems), times ``lexical_weight``. A memory matching a rare exact keyword (a product
   code, a name) scores high even when the vectors disagree, and a paraphrase scores its
   semantic similarity.
4. Results with ``score < min_score`` are dropped; the rest are returned in the fused
   order, except that memories sharing a rare name with one of the best results are placed
   right behind it (the second hop, ``memproxy.index.bridges``). ``min_score`` is an
   absolute relevance floor on the memory's own evidence: 0 keeps every memory with
   evidence, 1 only exact matches.

``Ranking`` holds the knobs; its defaults are the tuned pipeline, and
``Ranking.legacy()`` is the scoring before the gate (kept to measure against).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from memproxy.index.lexical import terms, tokenize

# Words of phatic talk. A query with no other indexed term carries no topic to search for:
# without this, "good morning" finds "I study every morning" by its shared word.
SMALL_TALK = frozenset(
    """hi hello hey hiya howdy yo greetings morning afternoon evening night gm gn thanks thank thx ty
    cheers appreciate appreciated welcome ok okay k kk alright right sure yes yeah yep yup nope nah
    cool nice great good fine perfect awesome excellent wonderful lovely amazing fantastic brilliant
    sweet neat lol haha hahaha hehe lmao rofl wow oh ah aha hmm hm uh um oops bye goodbye later see ya
    soon going sounds got gotcha understood noted agreed indeed exactly totally absolutely definitely much
    lot lots really sup whats hows please pls anyway""".split()
)
POOL_FACTOR = 3


@dataclass(frozen=True)
class Ranking:
    """How candidates are gated and scored (the defaults are what search uses)."""

    # Drop memories with neither a shared term nor a cosine above the embedder's floor.
    gate: bool = True
    # Measure cosines from the embedder's floor (True) or from 0 (the legacy scoring).
    rescale: bool = True
    # Also drop results scoring below this share of the best result's score.
    relative: float = 0.0
    # How much a full keyword match counts against a full semantic one in the score (see
    # ``default_ranking``).
    lexical_weight: float = 1.0
    # Follow names in the best results to the memories that continue them (a second hop,
    # ``memproxy.index.bridges``).
    bridges: bool = True

    @classmethod
    def legacy(cls) -> Ranking:
        """Scoring before the evidence gate: raw cosine, every candidate kept, one hop."""
        return cls(gate=False, rescale=False, relative=0.0, lexical_weight=1.0, bridges=False)


DEFAULT_RANKING = Ranking()
# A neural embedder's ranking: keywords count half as much as meaning.
NEURAL_RANKING = Ranking(lexical_weight=0.5)


def default_ranking(identity: str) -> Ranking:
    """The ranking for an embedder.

    The hash embedder's vectors only see words, so keywords count fully in its score (one
    shared word among several, "tell me about my cat", must stay above ``recall.min_score``:
    it has nothing else). A neural model's score leans on meaning: keywords count half (on
    the generated set that put the evidence first more often; the order is the fused one
    either way)."""
    return DEFAULT_RANKING if identity.startswith("hash:") else NEURAL_RANKING


def is_small_talk(query: str) -> bool:
    """True when the query has no indexed term outside ``SMALL_TALK`` (or none at all)."""
    return all(term in SMALL_TALK for term in tokenize(query))


@functools.lru_cache(maxsize=16_384)  # a scope's memories come back search after search
def _words(text: str) -> frozenset[str]:
    """A memory's indexed terms (stems)."""
    return frozenset(terms(text))


def term_coverage(text: str, term_idf: dict[str, float]) -> float:
    """IDF-weighted fraction of the query terms (``term_idf``) present in ``text``."""
    return coverage_of(term_idf)(text)


def coverage_of(term_idf: dict[str, float]) -> Callable[[str], float]:
    """``term_coverage`` with the query's side (total weight, stems) worked out once: a search
    scores dozens of candidates against the same query."""
    total = sum(term_idf.values())
    if total <= 0:
        return lambda _text: 0.0
    weights = [(term, idf / total) for term, idf in term_idf.items()]

    def coverage(text: str) -> float:
        present = _words(text)
        return sum(weight for term, weight in weights if term in present)

    return coverage


def cosine(query: npt.NDArray[np.float32] | None, blob: bytes | None) -> float:
    """Cosine of two unit vectors; 0 when the memory has no vector in the query's space."""
    if query is None or blob is None or len(blob) != query.size * 4:
        return 0.0
    vector = np.frombuffer(blob, dtype=np.float32)
    return max(0.0, float(np.dot(query.reshape(-1), vector)))


def cosines(query: npt.NDArray[np.float32] | None, blobs: list[bytes | None]) -> list[float]:
    """``cosine`` of each blob, in one matrix product (a search scores dozens of candidates)."""
    if query is None or not blobs:
        return [0.0] * len(blobs)
    size = query.size * 4
    fitting = [i for i, blob in enumerate(blobs) if blob is not None and len(blob) == size]
    out = [0.0] * len(blobs)
    if fitting:
        matrix = np.frombuffer(b"".join(blobs[i] or b"" for i in fitting), dtype=np.float32)
        products = matrix.reshape(len(fitting), query.size) @ query.reshape(-1)
        for i, value in zip(fitting, products.tolist(), strict=True):
            out[i] = max(0.0, value)
    return out


def above_floor(cos: float, floor: float) -> float:
    """The cosine's share of the way from the noise floor to 1, in [0, 1]."""
    if floor >= 1.0:
        return 0.0
    return min(max((cos - floor) / (1.0 - floor), 0.0), 1.0)


def combine(vector_score: float, lexical_score: float) -> float:
    """Probabilistic OR: either signal alone can make a memory relevant."""
    v = min(max(vector_score, 0.0), 1.0)
    lex = min(max(lexical_score, 0.0), 1.0)
    return 1.0 - (1.0 - v) * (1.0 - lex)


def relevance(cos: float, lexical: float, floor: float, ranking: Ranking = DEFAULT_RANKING) -> float | None:
    """A memory's score from its cosine and term coverage; None when it has no evidence."""
    semantic = above_floor(cos, floor) if ranking.rescale else max(cos, 0.0)
    if ranking.gate and lexical <= 0.0 and cos <= floor:
        return None
    return combine(semantic, lexical * ranking.lexical_weight)


def relevances(
    cos: list[float], lexical: list[float], floor: float, ranking: Ranking = DEFAULT_RANKING
) -> list[float | None]:
    """``relevance`` of each (cosine, coverage) pair in a few array operations (a search
    scores dozens of candidates): the same IEEE operations in the same order, so the same
    floats."""
    c, lex = np.asarray(cos, dtype=np.float64), np.asarray(lexical, dtype=np.float64)
    if not ranking.rescale:
        semantic = np.maximum(c, 0.0)
    elif floor >= 1.0:
        semantic = np.zeros_like(c)
    else:
        semantic = np.minimum(np.maximum((c - floor) / (1.0 - floor), 0.0), 1.0)
    v = np.minimum(np.maximum(semantic, 0.0), 1.0)
    w = np.minimum(np.maximum(lex * ranking.lexical_weight, 0.0), 1.0)
    scores = (1.0 - (1.0 - v) * (1.0 - w)).tolist()
    if not ranking.gate:
        return list(scores)
    gated = ((lex <= 0.0) & (c <= floor)).tolist()
    return [None if out else score for out, score in zip(gated, scores, strict=True)]
