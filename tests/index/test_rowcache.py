"""RowCache: the rows a search read beside a loaded index, bounded, dropped by num."""

from __future__ import annotations

from memproxy.index.rowcache import RowCache


def test_picks_only_cached_nums_including_known_absent_ones() -> None:
    cache = RowCache()
    cache.put({1: "row one", 2: None})
    assert cache.pick([1, 2, 3]) == {1: "row one", 2: None}


def test_drop_and_clear_forget_rows() -> None:
    cache = RowCache()
    cache.put({1: "a", 2: "b", 3: "c"})
    cache.drop([2, 9])
    assert cache.pick([1, 2, 3]) == {1: "a", 3: "c"}
    cache.clear()
    assert len(cache) == 0 and cache.pick([1, 3]) == {}


def test_bounded_with_the_oldest_put_leaving_first() -> None:
    cache = RowCache(max_entries=3)
    cache.put({1: "a", 2: "b", 3: "c"})
    cache.put({1: "a2"})  # re-put: now the newest
    cache.put({4: "d"})
    assert len(cache) == 3
    assert cache.pick([1, 2, 3, 4]) == {1: "a2", 3: "c", 4: "d"}
