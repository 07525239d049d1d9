"""The worker's handle table: engine objects and shared-memory regions the host refers to by id."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any


class HandleGone(LookupError):
    """Raised when a call names a handle that was released or never existed."""


class HandleTable:
    """Thread-safe id -> object table; released entries run their finaliser."""

    def __init__(self) -> None:
        self._items: dict[int, tuple[Any, Callable[[Any], None] | None]] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def add(self, obj: Any, on_release: Callable[[Any], None] | None = None) -> int:
        """Keep ``obj`` and return its id."""
        with self._lock:
            hid = next(self._ids)
            self._items[hid] = (obj, on_release)
            return hid

    def get(self, hid: int) -> Any:
        """The object behind ``hid``; raises ``HandleGone``."""
        with self._lock:
            item = self._items.get(hid)
        if item is None:
            raise HandleGone(f"handle {hid} is gone (released, or its worker restarted)")
        return item[0]

    def release(self, hids: list[int]) -> None:
        """Drop handles; unknown ids are ignored (release is idempotent)."""
        with self._lock:
            items = [self._items.pop(h) for h in hids if h in self._items]
        for obj, on_release in items:
            if on_release is not None:
                on_release(obj)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
