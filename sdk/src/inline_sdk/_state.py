"""Per-worker state a node reaches through its ``Context``: a shared cache and runtime stats.

``WorkerCache`` keeps what a library loads once per worker process (models, batchers) so that
nodes never keep it in module globals; every call of the worker sees the same cache. ``WorkerStats``
is what a library reports about its runtime (batches formed, the parallel split, compile mode):
the worker sends it to the host as ``Stats`` (``stats`` capability), which ``/v1/health`` shows.
Both are thread-safe and torch-free.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from ._protocol import Stats

T = TypeVar("T")


class WorkerCache:
    """A per-worker, thread-safe map: ``get(key, make)`` makes a value once per key."""

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def get(self, key: str, make: Callable[[], T]) -> T:
        """The value for ``key``, made by ``make()`` the first time (concurrent callers wait)."""
        with self._guard:
            if key in self._values:
                return self._values[key]
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            with self._guard:
                if key in self._values:
                    return self._values[key]
            value = make()
            with self._guard:
                self._values[key] = value
            return value

    def peek(self, key: str) -> Any | None:
        """The value for ``key``, or None."""
        with self._guard:
            return self._values.get(key)

    def pop(self, key: str) -> Any | None:
        """Remove and return the value for ``key`` (None if absent)."""
        with self._guard:
            return self._values.pop(key, None)


class WorkerStats:
    """Runtime figures by section (``batching``, ``parallel``, ``compile``...), sent to the host
    whenever a section changes. Without the ``stats`` capability it only keeps them."""

    def __init__(self, send: Callable[[object], None] | None = None) -> None:
        self._send = send
        self._sections: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def update(self, section: str, values: dict[str, Any]) -> None:
        """Merge ``values`` into ``section`` and report."""
        with self._lock:
            self._sections.setdefault(section, {}).update(copy.deepcopy(values))
            snapshot = copy.deepcopy(self._sections)
        if self._send is not None:
            self._send(Stats(sections=snapshot))

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """Every section as last updated."""
        with self._lock:
            return copy.deepcopy(self._sections)
