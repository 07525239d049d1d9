"""The output cache: LRU order, limits, pins and the eviction hook."""

from __future__ import annotations

from typing import Any

import pytest
from inline_core import OutputCache


def recording(**kwargs: Any) -> tuple[OutputCache, list[str]]:
    evicted: list[str] = []
    cache = OutputCache(on_evict=lambda key, outputs: evicted.append(key), **kwargs)
    return cache, evicted


def test_least_recently_used_is_evicted_first() -> None:
    cache, evicted = recording(max_entries=2)
    cache.put("a", {"x": 1})
    cache.put("b", {"x": 2})
    assert cache.get("a") == {"x": 1}  # now b is the oldest
    cache.put("c", {"x": 3})
    assert evicted == ["b"]
    assert "b" not in cache and "a" in cache and "c" in cache
    assert len(cache) == 2
    assert cache.get("b") is None


def test_pinned_entries_are_never_evicted() -> None:
    cache, evicted = recording(max_entries=1)
    cache.pin("a")
    cache.pin("a")
    cache.put("a", {})
    cache.put("b", {})
    assert evicted == ["b"]
    cache.put("c", {})
    assert evicted == ["b", "c"]
    assert "a" in cache and cache.is_pinned("a")
    cache.unpin("a")
    assert "a" in cache  # still pinned once
    cache.put("d", {})
    assert evicted == ["b", "c", "d"]
    cache.unpin("a")
    assert not cache.is_pinned("a")
    assert "a" in cache and len(cache) == 1
    cache.put("e", {})
    assert evicted == ["b", "c", "d", "a"]


def test_unpinning_shrinks_back_to_the_limit() -> None:
    cache, evicted = recording(max_entries=1)
    for key in "abc":
        cache.pin(key)
        cache.put(key, {})
    assert len(cache) == 3 and evicted == []
    for key in "abc":
        cache.unpin(key)
    assert evicted == ["a", "b"]
    assert list(k for k in "abc" if k in cache) == ["c"]


def test_byte_limit() -> None:
    cache, evicted = recording(max_entries=10, max_bytes=10, size_of=lambda o: o["size"])
    cache.put("a", {"size": 6})
    cache.put("b", {"size": 4})
    assert cache.total_bytes == 10 and evicted == []
    cache.put("c", {"size": 5})
    assert evicted == ["a"] and cache.total_bytes == 9
    cache.put("big", {"size": 50})
    assert evicted == ["a", "b", "c", "big"] and cache.total_bytes == 0
    with pytest.raises(ValueError, match="size_of"):
        OutputCache(max_bytes=1)


def test_replacing_an_entry_releases_the_old_outputs() -> None:
    released: list[dict[str, Any]] = []
    cache = OutputCache(on_evict=lambda key, outputs: released.append(outputs))
    first, second = {"h": 1}, {"h": 2}
    cache.put("k", first)
    cache.put("k", first)
    assert released == []
    cache.put("k", second)
    assert released == [first] and cache.get("k") is second


def test_clear_evicts_everything() -> None:
    cache, evicted = recording()
    cache.pin("a")
    cache.put("a", {})
    cache.put("b", {})
    cache.clear()
    assert evicted == ["a", "b"] and len(cache) == 0
    assert cache.is_pinned("a")


def test_empty_outputs_are_cached() -> None:
    cache = OutputCache()
    cache.put("k", {})
    assert cache.get("k") == {}
    assert "k" in cache
