"""The worker side of the memory broker: ask before loading, report what is held, evict.

One ``Memory`` per worker process, reached by nodes (and the libraries they call) as
``ctx.memory``. A library asks ``place(...)`` before it loads; the host's policy answers with a
plan per component (device, dtype, quantization, offload), after asking other workers to evict
their least-recently-used models when the budget is short. The library then ``hold``s what it
loaded, with a callback that frees it, and ``touch``es it on each use; the host sees every change.
Without a broker (an old host, or a library used outside a worker) ``place`` returns ``None`` and
the library decides alone.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ._protocol import ComponentPlan, HeldModel, Holding, ModelSize, PlaceAsk, Placed

log = logging.getLogger("inline.memory")

#: How long a load waits for the broker's answer (it may be evicting elsewhere first).
PLACE_TIMEOUT = 120.0


@dataclass
class _Held:
    name: str
    bytes: int
    plan: ComponentPlan
    free: Callable[[], None]
    last_used: float


class Memory:
    """The worker's broker client (thread-safe)."""

    def __init__(self, send: Callable[[object], None] | None) -> None:
        self._send = send
        self._ids = itertools.count(1)
        self._waiting: dict[int, tuple[threading.Event, list[Placed]]] = {}
        self._held: dict[str, _Held] = {}
        self._lock = threading.Lock()

    @property
    def brokered(self) -> bool:
        """Whether a host broker answers ``place``."""
        return self._send is not None

    def place(self, components: Sequence[ModelSize], activation_bytes: int = 0) -> Placed | None:
        """The broker's plan for ``components`` (``None`` without a broker). Blocks until the
        host answers; the host may evict models of other workers first."""
        if self._send is None:
            return None
        ask = next(self._ids)
        event, box = threading.Event(), []
        with self._lock:
            self._waiting[ask] = (event, box)
        try:
            self._send(
                PlaceAsk(ask=ask, components=list(components), activation_bytes=activation_bytes)
            )
            if not event.wait(PLACE_TIMEOUT):
                raise TimeoutError(f"the host's memory broker did not answer in {PLACE_TIMEOUT}s")
        finally:
            with self._lock:
                self._waiting.pop(ask, None)
        return box[0]

    def answered(self, msg: Placed) -> None:
        """The worker's reader hands the broker's answers here."""
        with self._lock:
            waiting = self._waiting.get(msg.ask)
        if waiting is not None:
            waiting[1].append(msg)
            waiting[0].set()

    def hold(
        self, slot: str, name: str, nbytes: int, plan: ComponentPlan, free: Callable[[], None]
    ) -> None:
        """Record that ``slot`` now holds ``name`` (``free()`` drops it when evicted)."""
        with self._lock:
            self._held[slot] = _Held(name, nbytes, plan, free, time.time())
        self.report()

    def touch(self, slot: str) -> None:
        """Mark ``slot`` as just used (eviction takes the least recently used first)."""
        with self._lock:
            held = self._held.get(slot)
            if held is not None:
                held.last_used = time.time()

    def drop(self, slot: str) -> None:
        """Forget ``slot`` (its model was freed by its owner)."""
        with self._lock:
            gone = self._held.pop(slot, None)
        if gone is not None:
            self.report()

    def evict(self, slots: Sequence[str]) -> None:
        """Free the models in ``slots`` (the broker asked), then report."""
        for slot in slots:
            with self._lock:
                held = self._held.pop(slot, None)
            if held is None:
                continue
            try:
                held.free()
            except Exception:  # a failing free must not kill the worker's reader
                log.exception("freeing %s (%s) failed", slot, held.name)
        self.report()

    def held(self) -> list[HeldModel]:
        """What this worker holds now."""
        with self._lock:
            return [
                HeldModel(slot=s, name=h.name, bytes=h.bytes, plan=h.plan, last_used=h.last_used)
                for s, h in self._held.items()
            ]

    def report(self) -> None:
        """Tell the host what is held (no-op without a broker)."""
        if self._send is not None:
            self._send(Holding(models=self.held()))
