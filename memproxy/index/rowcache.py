"""Memory rows a search read for a loaded scope, kept while the index says they are current.

A scope's best memories come back search after search; reading their rows from the
database each time was the largest part of recall after the vector scan itself. The index
entry is the one place that learns when a memory changes (it replays the change log), so
the cache lives beside it and is invalidated there.

Invariants:
- An entry is the database's row for a num as of the change seq the index reflects: it is
  put only when the read's seq equals the index's (``IndexManager.remember_rows``) and
  dropped when a change to that num is replayed; a reset or a drop clears the cache. So in
  a search whose ``latest_seq`` check passed, a cached row is never stale.
- ``None`` records that the database had no visible row for the num at that seq (expired,
  or deleted and not yet replayed). Expiry is the reader's to check on cached rows.
- Memory only, never written to disk; a memory deleted through the API leaves the cache at
  its scope's next catch-up (the next search), as its FAISS and BM25 entries do, and a
  forgotten scope's cache is cleared with its index (``IndexManager.drop_scope``).
- Opaque to the index layer (the search layer decides what a row is); bounded to
  ``max_entries``, oldest first out.
"""

from __future__ import annotations

from collections.abc import Iterable

MAX_ROWS = 512


class RowCache:
    def __init__(self, max_entries: int = MAX_ROWS) -> None:
        self.max_entries = max_entries
        self._rows: dict[int, object] = {}  # insertion order is age

    def __len__(self) -> int:
        return len(self._rows)

    def pick(self, nums: Iterable[int]) -> dict[int, object]:
        """The cached rows among ``nums`` (a value may be ``None``: known to be absent)."""
        rows = self._rows
        return {num: rows[num] for num in nums if num in rows}

    def put(self, rows: dict[int, object]) -> None:
        for num, row in rows.items():
            self._rows.pop(num, None)
            self._rows[num] = row
        excess = len(self._rows) - self.max_entries
        if excess > 0:
            for num in list(self._rows)[:excess]:
                del self._rows[num]

    def drop(self, nums: Iterable[int]) -> None:
        for num in nums:
            self._rows.pop(num, None)

    def clear(self) -> None:
        self._rows.clear()
