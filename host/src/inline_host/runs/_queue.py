"""The run queue: a deque that wakes one idle executor per run put in it, not all of them."""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

import anyio

T = TypeVar("T")


class WakingQueue(deque[T], Generic[T]):
    """FIFO of items for a pool of consumers; ``put`` wakes one idle consumer (waking every
    idle executor for each run, all but one to find the queue empty again, cost more than the
    run's own bookkeeping). Items can still be read, counted and removed as in a deque."""

    def __init__(self) -> None:
        super().__init__()
        #: One event per consumer waiting in ``take``, earliest first.
        self._idle: deque[anyio.Event] = deque()

    def put(self, item: T) -> None:
        """Append ``item`` and wake one waiting consumer (if any waits)."""
        self.append(item)
        if self._idle:
            self._idle.popleft().set()

    async def take(self) -> T:
        """The first item, waiting for one. A consumer woken for an item another consumer took
        meanwhile waits again (no wake-up is lost: a put always finds the queue or a waiter)."""
        while not self:
            event = anyio.Event()
            self._idle.append(event)
            try:
                await event.wait()
            except BaseException:  # cancelled while idle: no put may wake it any more
                if event in self._idle:
                    self._idle.remove(event)
                elif self and self._idle:  # it was woken: hand the wake-up on
                    self._idle.popleft().set()
                raise
        return self.popleft()
