"""The calls in flight to one worker: a mailbox each, and one watchdog for all their deadlines.

A call's messages (its events, then its end) are put in its ``Mailbox`` as the reader splits
them, and the call takes them in order; when its deadline passes, the ``Watchdog`` puts
``TIMED_OUT`` in. That is one future per wait, and no timer or cancel scope per call: the
watchdog sleeps until the nearest deadline it knows of, and is woken only by a call whose
deadline comes before that.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Mapping
from typing import Any, Final

import anyio

#: Put in a mailbox whose call is past its deadline.
TIMED_OUT: Final = object()


class Mailbox:
    """What one call receives, in order."""

    __slots__ = ("_items", "_loop", "_waiter", "deadline", "expired")

    def __init__(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self._items: deque[Any] = deque()
        self._loop = loop
        self._waiter: asyncio.Future[None] | anyio.Event | None = None
        self.deadline = math.inf
        self.expired = False

    def put(self, msg: Any) -> None:
        self._items.append(msg)
        waiter, self._waiter = self._waiter, None
        if isinstance(waiter, asyncio.Future):
            if not waiter.done():
                waiter.set_result(None)
        elif waiter is not None:
            waiter.set()

    async def get(self) -> Any:
        """The next message (waits for it)."""
        while not self._items:
            waiter: asyncio.Future[None] | anyio.Event
            waiter = anyio.Event() if self._loop is None else self._loop.create_future()
            self._waiter = waiter
            try:
                await (waiter.wait() if isinstance(waiter, anyio.Event) else waiter)
            finally:
                if self._waiter is waiter:
                    self._waiter = None
        return self._items.popleft()


class Watchdog:
    """Puts ``TIMED_OUT`` in the mailbox of every call past its deadline (one task per worker)."""

    def __init__(self, boxes: Mapping[int, Mailbox]) -> None:
        self._boxes = boxes
        #: The deadline the watchdog sleeps until (no call armed before now has an earlier one).
        self._next = math.inf
        self._wake: anyio.Event | None = None
        self._scope: anyio.CancelScope | None = None
        self._stopped = False

    def arm(self, box: Mailbox, timeout: float) -> None:
        """Give ``box`` a deadline ``timeout`` seconds from now."""
        box.deadline = time.monotonic() + timeout
        if box.deadline < self._next:
            self._next = box.deadline
            if self._wake is not None:
                self._wake.set()

    def stop(self) -> None:
        self._stopped = True
        if self._scope is not None:
            self._scope.cancel()

    async def run(self) -> None:
        with anyio.CancelScope() as self._scope:
            while not self._stopped:
                now = time.monotonic()
                nearest = math.inf
                for box in list(self._boxes.values()):
                    if box.deadline <= now:
                        if not box.expired:
                            box.expired = True
                            box.put(TIMED_OUT)
                    elif box.deadline < nearest:
                        nearest = box.deadline
                self._next = nearest
                self._wake = anyio.Event()
                with anyio.move_on_after(nearest - now):
                    await self._wake.wait()
