"""The node output cache: cache key -> a node's outputs, least recently used evicted first."""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import Any

__all__ = ("OutputCache",)

Outputs = dict[str, Any]
EvictHook = Callable[[str, Outputs], None]


class OutputCache:
    """An in-memory LRU cache of node outputs keyed by cache key.

    Bounded by ``max_entries`` and, when ``size_of`` is given, by ``max_bytes``. Pinned keys
    (a running plan pins every key it uses) are never evicted; pins nest, and a key may be pinned
    before it is stored. ``on_evict(key, outputs)`` is called for every entry that leaves the
    cache other than by ``get`` (eviction, replacement by a different value, ``clear``), after it
    has left, so the host can release the engine handles the outputs hold.
    """

    def __init__(
        self,
        max_entries: int = 1024,
        *,
        max_bytes: int | None = None,
        size_of: Callable[[Outputs], int] | None = None,
        on_evict: EvictHook | None = None,
    ) -> None:
        if max_entries < 0:
            raise ValueError("max_entries must be >= 0")
        if max_bytes is not None and size_of is None:
            raise ValueError("max_bytes needs a size_of callable")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.size_of = size_of
        self.on_evict = on_evict
        self._entries: OrderedDict[str, Outputs] = OrderedDict()
        self._sizes: dict[str, int] = {}
        self._bytes = 0
        self._pins: Counter[str] = Counter()

    def get(self, key: str) -> Outputs | None:
        """The outputs stored under ``key`` (now the most recently used), or ``None``."""
        outputs = self._entries.get(key)
        if outputs is not None:
            self._entries.move_to_end(key)
        return outputs

    def put(self, key: str, outputs: Outputs) -> None:
        """Store ``outputs`` under ``key`` as the most recently used entry, then evict down to
        the limits."""
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= self._sizes.pop(key, 0)
        self._entries[key] = outputs
        if self.size_of is not None:
            size = self.size_of(outputs)
            self._sizes[key] = size
            self._bytes += size
        if old is not None and old is not outputs:
            self._evicted(key, old)
        self._shrink()

    def pin(self, key: str) -> None:
        """Keep ``key`` from eviction until a matching ``unpin``."""
        self._pins[key] += 1

    def unpin(self, key: str) -> None:
        """Undo one ``pin``; the cache shrinks back to its limits once nothing holds an entry."""
        if self._pins.get(key, 0) <= 1:
            self._pins.pop(key, None)
        else:
            self._pins[key] -= 1
        self._shrink()

    def is_pinned(self, key: str) -> bool:
        """Whether ``key`` is pinned."""
        return self._pins.get(key, 0) > 0

    def clear(self) -> None:
        """Drop every entry, pinned or not (pins themselves stay)."""
        entries = list(self._entries.items())
        self._entries.clear()
        self._sizes.clear()
        self._bytes = 0
        for key, outputs in entries:
            self._evicted(key, outputs)

    def discard_where(self, predicate: Callable[[Outputs], bool]) -> int:
        """Drop every entry whose outputs match ``predicate`` (e.g. values a dead worker held),
        pinned or not, without calling ``on_evict``; returns how many were dropped."""
        doomed = [k for k, outputs in self._entries.items() if predicate(outputs)]
        for key in doomed:
            del self._entries[key]
            self._bytes -= self._sizes.pop(key, 0)
        return len(doomed)

    @property
    def total_bytes(self) -> int:
        """The summed ``size_of`` of the entries (0 without ``size_of``)."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def _over(self) -> bool:
        if len(self._entries) > self.max_entries:
            return True
        return self.max_bytes is not None and self._bytes > self.max_bytes

    def _shrink(self) -> None:
        if not self._over():
            return
        pins = self._pins
        # least recently used first, past the pinned ones: one unpinned key at a time, the walk
        # begun anew after each eviction (an on_evict hook may change the entries)
        while self._over():
            key = next((k for k in self._entries if not pins.get(k)), None)
            if key is None:
                return  # everything left is pinned
            outputs = self._entries.pop(key)
            self._bytes -= self._sizes.pop(key, 0)
            self._evicted(key, outputs)

    def _evicted(self, key: str, outputs: Outputs) -> None:
        if self.on_evict is not None:
            self.on_evict(key, outputs)
