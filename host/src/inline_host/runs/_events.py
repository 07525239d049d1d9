"""Run events to many subscribers: encoded once, queued per subscriber, slow readers coalesced.

A subscriber's queue never blocks the run: ``progress`` (and ``preview``) events for a node
replace an unsent one of the same node, so a reader that never reads holds at most one progress
per node plus the few events that are never dropped (``node_done`` and the terminal one).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import anyio
import msgspec

_encoder = msgspec.json.Encoder()

TERMINAL = frozenset({"run_done", "error", "cancelled"})


class Event:
    """One encoded event; ``coalesce`` names what a newer event of the same kind replaces."""

    __slots__ = ("coalesce", "data", "terminal", "type")

    def __init__(self, payload: dict[str, Any], coalesce: str | None = None) -> None:
        self.type: str = payload["type"]
        self.data = _encoder.encode(payload)
        self.coalesce = coalesce
        self.terminal = self.type in TERMINAL


class Subscriber:
    """One reader's queue of events."""

    def __init__(self) -> None:
        self._queue: deque[Event] = deque()
        self._wake = anyio.Event()
        self.dropped = 0

    def push(self, event: Event) -> None:
        """Queue ``event``, replacing an unsent event it supersedes."""
        if event.coalesce is not None:
            for i, queued in enumerate(self._queue):
                if queued.coalesce == event.coalesce:
                    self._queue[i] = event
                    self.dropped += 1
                    self._wake.set()
                    return
        self._queue.append(event)
        self._wake.set()

    async def next_batch(self) -> list[Event]:
        """Wait for at least one event and take everything queued."""
        while not self._queue:
            await self._wake.wait()
            self._wake = anyio.Event()
        batch = list(self._queue)
        self._queue.clear()
        return batch


class Broadcaster:
    """The subscribers of one run."""

    def __init__(self) -> None:
        self.subscribers: set[Subscriber] = set()

    def subscribe(self) -> Subscriber:
        sub = Subscriber()
        self.subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        self.subscribers.discard(sub)

    def publish(self, payload: dict[str, Any], coalesce: str | None = None) -> None:
        if not self.subscribers:
            return
        event = Event(payload, coalesce)
        for sub in self.subscribers:
            sub.push(event)
