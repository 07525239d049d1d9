"""Node slots: how many calls of one node type run at once, across every run.

A node declares ``concurrency`` (default 1). Calls beyond it wait, and a freed slot goes to the
waiting call of the earliest run (then first come, first served), so a run submitted first is
never overtaken on a busy node by one submitted after it.

Slots belong to one installed version of the node: after an upgrade, calls still finishing on
the old version's worker do not hold back the first calls of the new one.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio


class _Slot:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.busy = 0
        self.waiting: list[tuple[int, int, anyio.Event]] = []


class NodeSlots:
    """Per node type, a counted slot whose waiters are served earliest run first."""

    def __init__(self) -> None:
        self._slots: dict[tuple[str, str], _Slot] = {}
        self._arrivals = itertools.count()

    @asynccontextmanager
    async def hold(
        self, node_type: str, capacity: int, order: int, version: str = ""
    ) -> AsyncIterator[None]:
        """Hold one of ``node_type``'s ``capacity`` slots (of its pack's ``version``);
        ``order`` ranks the waiting run."""
        key = (node_type, version)
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = _Slot(capacity)
        slot.capacity = max(1, capacity)
        if slot.busy < slot.capacity and not slot.waiting:
            slot.busy += 1
        else:
            entry = (order, next(self._arrivals), anyio.Event())
            heapq.heappush(slot.waiting, entry)
            try:
                await entry[2].wait()
            except BaseException:
                if entry[2].is_set():
                    self._release(slot)  # handed over just as we were cancelled: pass it on
                else:
                    slot.waiting.remove(entry)
                    heapq.heapify(slot.waiting)
                raise
        try:
            yield
        finally:
            self._release(slot)

    def resize(self, node_type: str, capacity: int) -> None:
        """Give ``node_type``'s slots (of every version) ``capacity``; a larger one lets the
        earliest waiting calls in at once."""
        for (kind, _), slot in self._slots.items():
            if kind != node_type:
                continue
            slot.capacity = max(1, capacity)
            while slot.waiting and slot.busy < slot.capacity:
                slot.busy += 1
                heapq.heappop(slot.waiting)[2].set()

    def _release(self, slot: _Slot) -> None:
        if slot.waiting and slot.busy <= slot.capacity:
            # hand the slot straight to the next waiter: busy stays the same
            heapq.heappop(slot.waiting)[2].set()
        else:
            slot.busy -= 1

    def waiting(self) -> dict[str, int]:
        """How many calls wait per node type (for health)."""
        counts: dict[str, int] = {}
        for (node_type, _), slot in self._slots.items():
            if slot.waiting:
                counts[node_type] = counts.get(node_type, 0) + len(slot.waiting)
        return counts
