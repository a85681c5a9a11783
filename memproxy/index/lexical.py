"""In-memory BM25 index of one scope's memory texts (the lexical half of hybrid search).

Invariants:
- Derived state: built from SQLite texts, persisted only inside the scope's index snapshot.
- Documents are keyed by ``memories.num``. Each document occupies a *slot*; removal only
  tombstones the slot (``alive[slot] = False``) and the postings are compacted once the
  dead slots pile up, so a removal never scans the vocabulary.
- Postings are per-term numpy arrays (slots, term frequencies); additions go to a small
  per-term pending list merged into the arrays on the next read, so bulk loading is
  linear and a query is a handful of vectorized operations.
- Terms are Snowball (Porter 2) stems of the non-stopword words (``terms``): "works" and
  "work", "researching" and "research" are one term, for documents and queries alike.
- A document's *context* is the live document just before it in num order (what was said
  or stored just before it); ``score_all`` scores each document alone and joined with its
  context, from the same postings (no second index to keep in step).
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import snowballstemmer

_WORD = re.compile(r"\w+")

STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself
    yourselves s t""".split()
)

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float32]

# Marks a posting list still inside ``_base`` (compared by identity).
_UNSLICED: Ints = np.zeros(0, dtype=np.int64)
_UNSLICED_TF: Floats = np.zeros(0, dtype=np.float32)

# Compact once this many slots are dead and they are at least a quarter of all slots.
_COMPACT_MIN_DEAD = 1024


# BM25 parameters fitted on LoCoMo dev (bench/retrieval_quality.py --locomo): chat turns are
# short and one mention is what counts, so term frequency saturates early (k1 0.9) and long
# turns are barely penalised (b 0.3). With the context join and stems, R@1/10 on dev went
# 37.8/75.5 (k1 1.2, b 0.75, crude stems) -> 38.8/76.0 (offline replica of the ranking).
K1 = 0.9
B = 0.3
# Bumped whenever what a term is changes, so snapshots holding older terms are rebuilt.
TERMS_VERSION = 2

_STEMMER = snowballstemmer.stemmer("english")


def tokenize(text: str) -> list[str]:
    """Lowercase unicode words minus English stopwords."""
    return [w for w in _WORD.findall(text.lower()) if w not in STOPWORDS]


@functools.lru_cache(maxsize=131_072)  # a scope's vocabulary comes back text after text
def stem(word: str) -> str:
    """The Snowball English stem of a lowercase word ("lives" -> "live", "living" -> "live")."""
    return str(_STEMMER.stemWord(word))


def terms(text: str) -> list[str]:
    """The indexed terms of a text: the stems of its non-stopword words, in order."""
    return [stem(word) for word in tokenize(text)]


@dataclass
class LexicalScores:
    """BM25 of every slot for one query, alone and joined with its context (see ``score_all``)."""

    nums: Ints  # the num of each slot
    own: Floats  # BM25 of the slot's text (0 for dead slots)
    context: Floats  # BM25 of the text of the slot's context followed by its own
    prev: Ints  # the slot of its context (the live document before it by num), -1 if none
    alive: npt.NDArray[np.bool_]
    slot_of: dict[int, int]  # the slot of each live num (the index's own map: read, never write)


def _grow(array: npt.NDArray[np.generic], capacity: int) -> npt.NDArray[np.generic]:
    out = np.zeros(capacity, dtype=array.dtype)
    out[: len(array)] = array
    return out


class LexicalIndex:
    """BM25 (k1, b) over the documents of one scope."""

    def __init__(self, k1: float = K1, b: float = B) -> None:
        self.k1 = k1
        self.b = b
        self._term_ids: dict[str, int] = {}
        self._terms: list[str] = []
        self._slots: list[Ints] = []
        self._tfs: list[Floats] = []
        self._pending: dict[int, tuple[list[int], list[float]]] = {}
        # (offsets, slots, tfs) of a loaded snapshot; see ``from_arrays``.
        self._base: tuple[list[int], Ints, Floats] | None = None
        self._slot_of: dict[int, int] = {}
        self._nums: Ints = np.zeros(0, dtype=np.int64)
        self._doc_len: Floats = np.zeros(0, dtype=np.float32)
        self._alive = np.zeros(0, dtype=bool)
        self._n_slots = 0
        self._total_len = 0.0
        self._dead = 0
        self._prev: Ints | None = None  # context slots, recomputed after a change

    def __len__(self) -> int:
        return len(self._slot_of)

    def __contains__(self, num: int) -> bool:
        return num in self._slot_of

    def add(self, num: int, text: str) -> None:
        """Index ``text`` under ``num``, replacing any previous text of ``num``."""
        self.remove(num)
        self._prev = None
        tokens = terms(text)
        slot = self._n_slots
        self._ensure_capacity(slot + 1)
        self._n_slots += 1
        self._nums[slot] = num
        self._doc_len[slot] = len(tokens)
        self._alive[slot] = True
        self._slot_of[num] = slot
        self._total_len += len(tokens)
        for term, tf in Counter(tokens).items():
            tid = self._term_id(term)
            slots, tfs = self._pending.setdefault(tid, ([], []))
            slots.append(slot)
            tfs.append(float(tf))

    def remove(self, num: int) -> None:
        slot = self._slot_of.pop(num, None)
        if slot is None:
            return
        self._prev = None
        self._alive[slot] = False
        self._total_len -= float(self._doc_len[slot])
        self._dead += 1
        if self._dead >= _COMPACT_MIN_DEAD and self._dead * 4 >= self._n_slots:
            self.compact()

    def term_idf(self, query: str) -> dict[str, float]:
        """IDF of each query term; a term no document has is weighted as if one had it.

        (Ignoring unknown terms would let a memory matching one word of a long question
        look like a full match; counting them as rare keeps coverage honest.)
        """
        return {term: self._idf(df) for term, df in self.doc_freq(query).items()}

    def _idf(self, df: int) -> float:
        n_docs = len(self._slot_of)
        df = max(df, 1)
        return math.log(1.0 + max(n_docs - df + 0.5, 0.0) / (df + 0.5))

    def doc_freq(self, query: str) -> dict[str, int]:
        """How many live documents contain each indexed term of ``query``."""
        alive = self._alive[: self._n_slots]
        dfs: dict[str, int] = {}
        for term in set(terms(query)):
            tid = self._term_ids.get(term)
            dfs[term] = 0 if tid is None else int(np.count_nonzero(alive[self._postings(tid)[0]]))
        return dfs

    def search(self, query: str, k: int) -> list[tuple[int, float]]:
        """Top ``k`` documents by BM25 score (only documents sharing a query term)."""
        n_docs = len(self._slot_of)
        matched = {term: df for term, df in self.doc_freq(query).items() if df > 0}
        if not matched or n_docs == 0 or k <= 0:
            return []
        avgdl = max(self._total_len / n_docs, 1e-9)
        alive = self._alive[: self._n_slots]
        scores = np.zeros(self._n_slots, dtype=np.float32)
        for term, df in matched.items():
            idf = self._idf(df)
            slots, tfs = self._postings(self._term_ids[term])
            norm = self.k1 * (1.0 - self.b + self.b * self._doc_len[slots] / avgdl)
            scores[slots] += idf * tfs * (self.k1 + 1.0) / (tfs + norm)
        scores[~alive] = 0.0
        hits = np.flatnonzero(scores > 0)
        if len(hits) > k:
            hits = hits[np.argpartition(-scores[hits], k - 1)[:k]]
        hits = hits[np.argsort(-scores[hits], kind="stable")]
        return [(int(self._nums[s]), float(scores[s])) for s in hits]

    def score_all(self, query: str) -> LexicalScores:
        """BM25 of every slot, alone and joined with its context, for ``query``.

        The joined score is BM25 over the corpus of joined documents (term frequencies and
        lengths summed with the context's, document frequencies counted over the joins), so
        it is exactly what an index of "previous text + own text" would give."""
        n = self._n_slots
        alive = self._alive[:n]
        prev = self._context_slots()
        has_prev = prev >= 0
        prev_or_self = np.where(has_prev, prev, np.arange(n))
        own = np.zeros(n, dtype=np.float32)
        context = np.zeros(n, dtype=np.float32)
        n_docs = len(self._slot_of)
        if n_docs == 0:
            return LexicalScores(self._nums[:n], own, context, prev, alive, self._slot_of)
        doc_len = self._doc_len[:n]
        joined_len = doc_len + np.where(has_prev, doc_len[prev_or_self], 0.0)
        own_norm = self.k1 * (1.0 - self.b + self.b * doc_len / max(self._total_len / n_docs, 1e-9))
        avg_joined = max(float(joined_len[alive].sum()) / n_docs, 1e-9)
        joined_norm = self.k1 * (1.0 - self.b + self.b * joined_len / avg_joined)
        for term in set(terms(query)):
            tid = self._term_ids.get(term)
            if tid is None:
                continue
            slots, tfs = self._postings(tid)
            tf = np.zeros(n, dtype=np.float32)
            tf[slots] = tfs
            tf[~alive] = 0.0
            df = int(np.count_nonzero(tf))
            if df == 0:
                continue
            own += self._idf(df) * tf * (self.k1 + 1.0) / (tf + own_norm)
            joined = tf + np.where(has_prev, tf[prev_or_self], 0.0)
            joined[~alive] = 0.0
            context += (
                self._idf(int(np.count_nonzero(joined))) * joined * (self.k1 + 1.0) / (joined + joined_norm)
            )
        return LexicalScores(self._nums[:n], own, context, prev, alive, self._slot_of)

    def _context_slots(self) -> Ints:
        """For each slot, the slot of the live document with the next lower num (-1: none)."""
        if self._prev is None or len(self._prev) != self._n_slots:
            n = self._n_slots
            live = np.flatnonzero(self._alive[:n])
            ordered = live[np.argsort(self._nums[live], kind="stable")]
            prev = np.full(n, -1, dtype=np.int64)
            prev[ordered[1:]] = ordered[:-1]
            self._prev = prev
        return self._prev

    def compact(self) -> None:
        """Drop tombstoned slots from every posting list and renumber the slots."""
        self._merge_all_pending()
        n = self._n_slots
        keep_slots = np.flatnonzero(self._alive[:n])
        remap = np.full(max(n, 1), -1, dtype=np.int64)
        remap[keep_slots] = np.arange(len(keep_slots), dtype=np.int64)
        for tid in range(len(self._terms)):
            slots, tfs = self._postings(tid)
            keep = self._alive[slots]
            self._slots[tid] = remap[slots[keep]]
            self._tfs[tid] = tfs[keep]
        self._base = None
        self._nums = self._nums[keep_slots].copy()
        self._doc_len = self._doc_len[keep_slots].copy()
        self._alive = np.ones(len(keep_slots), dtype=bool)
        self._n_slots = len(keep_slots)
        self._slot_of = {int(num): slot for slot, num in enumerate(self._nums.tolist())}
        self._dead = 0
        self._prev = None

    def to_arrays(self) -> dict[str, npt.NDArray[np.generic]]:
        """A compact, pickle-free serialization (for the scope snapshot)."""
        self.compact()
        lengths = np.array([len(s) for s in self._slots], dtype=np.int64)
        offsets = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(lengths)])
        empty_i, empty_f = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        return {
            "lex_terms": np.frombuffer("\n".join(self._terms).encode(), dtype=np.uint8),
            "lex_offsets": offsets,
            "lex_slots": np.concatenate(self._slots) if self._slots else empty_i,
            "lex_tfs": np.concatenate(self._tfs) if self._tfs else empty_f,
            "lex_nums": self._nums[: self._n_slots].copy(),
            "lex_doclen": self._doc_len[: self._n_slots].copy(),
            "lex_params": np.array([self.k1, self.b, TERMS_VERSION], dtype=np.float64),
        }

    @classmethod
    def from_arrays(cls, arrays: dict[str, npt.NDArray[np.generic]]) -> LexicalIndex:
        params = [float(x) for x in arrays["lex_params"]]
        if len(params) < 3 or int(params[2]) != TERMS_VERSION:
            raise ValueError("lexical snapshot holds terms of an older version")
        k1, b = params[0], params[1]
        index = cls(k1=k1, b=b)
        raw = bytes(arrays["lex_terms"].tobytes()).decode()
        index._terms = raw.split("\n") if raw else []
        index._term_ids = dict(zip(index._terms, range(len(index._terms)), strict=True))
        # Posting lists are sliced out of these on first use (loading stays O(arrays)).
        index._base = (
            arrays["lex_offsets"].astype(np.int64).tolist(),
            arrays["lex_slots"].astype(np.int64),
            arrays["lex_tfs"].astype(np.float32),
        )
        index._slots = [_UNSLICED] * len(index._terms)
        index._tfs = [_UNSLICED_TF] * len(index._terms)
        index._nums = arrays["lex_nums"].astype(np.int64)
        index._doc_len = arrays["lex_doclen"].astype(np.float32)
        index._n_slots = len(index._nums)
        index._alive = np.ones(index._n_slots, dtype=bool)
        index._slot_of = dict(zip(index._nums.tolist(), range(index._n_slots), strict=True))
        index._total_len = float(index._doc_len.sum())
        if len(index._slot_of) != index._n_slots:
            raise ValueError("lexical snapshot has duplicate document numbers")
        return index

    def _term_id(self, term: str) -> int:
        tid = self._term_ids.get(term)
        if tid is None:
            tid = len(self._terms)
            self._term_ids[term] = tid
            self._terms.append(term)
            self._slots.append(np.zeros(0, dtype=np.int64))
            self._tfs.append(np.zeros(0, dtype=np.float32))
        return tid

    def _postings(self, tid: int) -> tuple[Ints, Floats]:
        if self._slots[tid] is _UNSLICED and self._base is not None:
            offsets, slots, tfs = self._base
            self._slots[tid] = slots[offsets[tid] : offsets[tid + 1]]
            self._tfs[tid] = tfs[offsets[tid] : offsets[tid + 1]]
        pending = self._pending.pop(tid, None)
        if pending is not None:
            self._slots[tid] = np.concatenate([self._slots[tid], np.asarray(pending[0], dtype=np.int64)])
            self._tfs[tid] = np.concatenate([self._tfs[tid], np.asarray(pending[1], dtype=np.float32)])
        return self._slots[tid], self._tfs[tid]

    def _merge_all_pending(self) -> None:
        for tid in list(self._pending):
            self._postings(tid)

    def _ensure_capacity(self, needed: int) -> None:
        if needed <= len(self._doc_len):
            return
        capacity = max(needed, 2 * len(self._doc_len), 1024)
        self._nums = _grow(self._nums, capacity)  # type: ignore[assignment]
        self._doc_len = _grow(self._doc_len, capacity)  # type: ignore[assignment]
        self._alive = _grow(self._alive, capacity)  # type: ignore[assignment]
