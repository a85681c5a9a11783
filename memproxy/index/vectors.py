"""One scope's FAISS vectors, addressed by ``memories.num``.

Invariants:
- FAISS holds vectors under dense internal ids 0..ntotal-1; ``nums[internal]`` is the
  memory number, or -1 once that vector is tombstoned (deleted or superseded).
- At most one live internal id per num (``pos``). Below the HNSW threshold the search is
  exhaustive over half-precision copies of the unit vectors (``IndexScalarQuantizer``,
  fp16: inner products within ~1e-3 of float32); above it the same bookkeeping sits on
  ``IndexHNSWFlat``. Either way the order is a candidate order: callers rescore with the
  stored float32 vectors (``memproxy.memory.search``).
- Tombstones instead of ``remove_ids``: HNSW cannot remove at all and a flat removal is
  an O(n) memmove per delete; searches over-fetch and drop tombstones, and the set is
  compacted (re-added from live vectors) once tombstones reach a fraction of the total.
"""

from __future__ import annotations

import threading
from typing import Any

import faiss
import numpy as np
import numpy.typing as npt

_THREAD = threading.local()
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 80
HNSW_EF_SEARCH = 96


def new_index(dim: int, hnsw: bool) -> Any:
    """An empty FAISS index: an exhaustive scan of fp16 codes, or an HNSW graph.

    fp16 rather than ``IndexFlatIP``: a scan reads every vector, so it is bound by memory
    traffic; half the bytes made recall's search about 0.5 ms faster at 10k memories end to
    end (``bench/overhead.py``) and halve a loaded scope's memory. No training is needed.
    """
    if not hnsw:
        return faiss.IndexScalarQuantizer(dim, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT)
    index = faiss.IndexHNSWFlat(dim, HNSW_M, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
    index.hnsw.efSearch = HNSW_EF_SEARCH
    return index


def _single_omp_thread() -> None:
    # One query is ~1-4 ms of single-threaded work; an OpenMP team makes it several times
    # slower through spin contention (bench/recall.py). The setting is per calling thread,
    # hence on each search (once per thread) rather than once at start.
    if not getattr(_THREAD, "omp_single", False):
        faiss.omp_set_num_threads(1)
        _THREAD.omp_single = True


class VectorSet:
    def __init__(
        self,
        dim: int,
        hnsw: bool = False,
        index: Any = None,
        nums: npt.NDArray[np.int64] | None = None,
    ) -> None:
        self.dim = dim
        self.hnsw = hnsw
        self.index = index if index is not None else new_index(dim, hnsw)
        self.nums: npt.NDArray[np.int64] = (
            nums.astype(np.int64) if nums is not None else np.zeros(0, dtype=np.int64)
        )
        if len(self.nums) != self.index.ntotal:
            raise ValueError("vector snapshot ids do not match the index size")
        live = np.flatnonzero(self.nums >= 0)
        self.pos: dict[int, int] = dict(zip(self.nums[live].tolist(), live.tolist(), strict=True))
        self.dead = len(self.nums) - len(live)
        # For ``internal_ids``: the live nums sorted, with their internal ids (None: stale).
        self._sorted: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None = None
        # For ``pair_products``, by first internal id: the second id and v.p of its pair.
        self._pair_with = np.zeros(0, dtype=np.int64)
        self._pair_value = np.zeros(0, dtype=np.float64)

    def __len__(self) -> int:
        return len(self.pos)

    def __contains__(self, num: int) -> bool:
        return num in self.pos

    @property
    def total(self) -> int:
        return int(self.index.ntotal)

    def add(self, nums: list[int], vectors: npt.NDArray[np.float32]) -> None:
        """Add (or replace) the vectors of ``nums``."""
        if not nums:
            return
        for num in nums:
            self.remove(num)
        start = self.total
        self.index.add(np.ascontiguousarray(vectors, dtype=np.float32))
        self.nums = np.concatenate([self.nums, np.asarray(nums, dtype=np.int64)])
        for offset, num in enumerate(nums):
            self.pos[num] = start + offset
        self._sorted = None

    def remove(self, num: int) -> None:
        internal = self.pos.pop(num, None)
        if internal is not None:
            self._sorted = None
            self.nums[internal] = -1
            self.dead += 1

    def needs_compaction(self) -> bool:
        return self.dead >= 64 and self.dead * 4 >= self.total

    def compact(self, hnsw: bool | None = None) -> VectorSet:
        """A new set holding only the live vectors (optionally switching index kind)."""
        live = np.flatnonzero(self.nums >= 0)
        target = VectorSet(self.dim, self.hnsw if hnsw is None else hnsw)
        if len(live):
            vectors = self.index.reconstruct_n(0, self.total)[live]
            target.add(self.nums[live].tolist(), vectors)
        return target

    def internal_ids(self, nums: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The live internal id of each num (-1 where it has no vector), in array operations.

        A sorted copy of the live (num, internal id) pairs is made on the first lookup after a
        change: a search then maps its whole candidate pool at once instead of num by num."""
        if self._sorted is None:
            live = np.flatnonzero(self.nums >= 0)
            order = np.argsort(self.nums[live], kind="stable")
            self._sorted = (self.nums[live][order], live[order].astype(np.int64))
        keys, ids = self._sorted
        if len(keys) == 0 or len(nums) == 0:
            return np.full(len(nums), -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(keys, nums), len(keys) - 1)
        return np.where(keys[at] == nums, ids[at], -1)

    def inner_products(
        self, vector: npt.NDArray[np.float32], ids: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.float64]:
        """The inner product of ``vector`` with the vectors of ``ids`` (distinct live internal ids).

        The exhaustive index is searched restricted to exactly those ids (a selector): 0.1 ms
        for 600 of 10k vectors, where decoding them with ``reconstruct_batch`` took 3.5 ms.
        An HNSW graph cannot be searched exhaustively, so its flat vectors are read back."""
        out = np.zeros(len(ids), dtype=np.float64)
        if len(ids) == 0 or vector.shape[-1] != self.dim:
            return out
        query = np.ascontiguousarray(vector.reshape(1, -1), dtype=np.float32)
        if self.hnsw:
            out[:] = self.index.reconstruct_batch(ids) @ query[0]
            return out
        _single_omp_thread()
        params = faiss.SearchParameters(sel=faiss.IDSelectorBatch(ids))  # type: ignore[call-arg]
        scores, found = self.index.search(query, len(ids), params=params)
        hit = found[0] >= 0
        order = np.argsort(ids, kind="stable")
        out[order[np.searchsorted(ids[order], found[0][hit])]] = scores[0][hit]
        return out

    def pair_products(
        self, first: npt.NDArray[np.int64], second: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.float64]:
        """``v.p`` of the vectors of each pair of live internal ids. Query-independent, so kept
        per first id (a memory's context pair comes back search after search; reading vectors
        back costs ~6 us each); an internal id never changes its vector, so nothing goes stale."""
        if len(self._pair_with) < self.total:
            grow = self.total - len(self._pair_with)
            self._pair_with = np.concatenate([self._pair_with, np.full(grow, -1, dtype=np.int64)])
            self._pair_value = np.concatenate([self._pair_value, np.zeros(grow, dtype=np.float64)])
        missing = self._pair_with[first] != second
        if missing.any():
            left = self.index.reconstruct_batch(first[missing])
            right = self.index.reconstruct_batch(second[missing])
            self._pair_value[first[missing]] = np.einsum("ij,ij->i", left, right)
            self._pair_with[first[missing]] = second[missing]
        products: npt.NDArray[np.float64] = self._pair_value[first]
        return products

    def search(self, vector: npt.NDArray[np.float32], k: int) -> list[tuple[int, float]]:
        """Top ``k`` live nums by inner product, best first."""
        if k <= 0 or not self.pos or vector.shape[-1] != self.dim:
            return []
        _single_omp_thread()
        query = np.ascontiguousarray(vector.reshape(1, -1), dtype=np.float32)
        fetch = min(self.total, k + min(self.dead, 4 * k) + 8)
        while True:
            if self.hnsw:
                self.index.hnsw.efSearch = max(HNSW_EF_SEARCH, fetch)
            scores, ids = self.index.search(query, fetch)
            nums = self.nums[ids[0]]  # -1 ids (fewer results than asked) read the last num; masked next
            live = (ids[0] >= 0) & (nums >= 0)
            hits = list(zip(nums[live].tolist(), scores[0][live].tolist(), strict=True))
            # Tombstones may have crowded out live hits: widen until we have k or all.
            if len(hits) >= k or fetch >= self.total:
                return hits[:k]
            fetch = min(self.total, fetch * 4)
