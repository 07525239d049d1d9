"""The run store behind a gate: short writes on the loop, waits off it, failures kept and reported.

A call runs on the event loop when it can write at once (WAL, ``synchronous=NORMAL``: a commit
is tens of microseconds, less than the hop to a worker thread); when it would wait (another
connection holds the write lock, another thread is in the store) or while the store is
failing, it runs in a worker thread, so the loop never waits on a lock.

A write that fails (a full disk, a database locked by another process) never escapes as a
crash: submits get ``StorageFailing`` (503), a run's end that could not be written is kept and
written once the store works again, and ``status()`` probes a failing store so that
``/v1/health`` recovers by itself.
"""

from __future__ import annotations

import logging
import sqlite3
from collections import deque
from collections.abc import Callable
from typing import Any

import anyio

from .._errors import InlineHostError
from ._store import RunStore, StoredRun, TakeRecord

log = logging.getLogger("inline.runs")
#: What a failing store raises (a full disk, a locked or broken database).
STORAGE_ERRORS = (sqlite3.Error, OSError)


class StorageFailing(InlineHostError):
    """The run store cannot take the request now (answered 503 with ``Retry-After``)."""

    retry_after = 5


class StoreGate:
    """Calls into a ``RunStore`` from async code, remembering why it fails."""

    def __init__(self, store: RunStore) -> None:
        self.store = store
        #: Why the store is failing now (None while it works).
        self.error: str | None = None
        self._unwritten: deque[
            tuple[str, str, dict[str, Any], StoredRun | None, tuple[TakeRecord, ...]]
        ] = deque()

    def failed(self, exc: BaseException) -> None:
        self.error = f"{type(exc).__name__}: {exc}"
        log.error("the run store is failing: %s", self.error)

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, a call of the store: at once when it need not wait, else in a worker
        thread; a failing store raises ``StorageFailing``."""
        try:
            if self.error is None:
                done, result = self.store.attempt(fn, *args)
                if done:
                    return result
            return await anyio.to_thread.run_sync(fn, *args)
        except STORAGE_ERRORS as exc:
            self.failed(exc)
            raise StorageFailing(f"The run store is failing ({exc}); retry later.") from None

    async def settle(
        self,
        run_id: str,
        status: str,
        doc: Callable[[], dict[str, Any]],
        new: StoredRun | None,
        takes: tuple[TakeRecord, ...] = (),
    ) -> BaseException | None:
        """Write a run's end (after any kept earlier), with ``takes`` (its last node's, not
        written yet); the store's error, or None. A refused end is kept (with ``doc()`` taken
        again, the caller may have changed the run)."""
        store = self.store
        try:
            if self.error is None and not self._unwritten:  # at once: nothing to wait for
                done, _ = store.attempt(store.settle, run_id, status, doc(), new=new, takes=takes)
                if done:
                    return None
            with anyio.CancelScope(shield=True):  # never half-done, even at shutdown
                await self._flush()
                state = doc()
                await anyio.to_thread.run_sync(
                    lambda: store.settle(run_id, status, state, new=new, takes=takes)
                )
        except STORAGE_ERRORS as exc:
            self.failed(exc)
            return exc
        self.error = None
        return None

    def keep(
        self,
        run_id: str,
        status: str,
        doc: dict[str, Any],
        new: StoredRun | None,
        takes: tuple[TakeRecord, ...] = (),
    ) -> None:
        """Keep a run's end to write once the store works again."""
        self._unwritten.append((run_id, status, doc, new, takes))

    async def status(self) -> str | None:
        """Why the store is failing, or None; a failing store is probed (and what it refused
        is written) so that health recovers by itself."""
        if self.error is not None:
            try:
                await anyio.to_thread.run_sync(self.store.probe)
                with anyio.CancelScope(shield=True):
                    await self._flush()
            except STORAGE_ERRORS:
                pass
            else:
                self.error = None
        return self.error

    async def _flush(self) -> None:
        while self._unwritten:
            run_id, status, doc, new, takes = self._unwritten[0]
            await anyio.to_thread.run_sync(
                lambda: self.store.settle(run_id, status, doc, new=new, takes=takes)  # noqa: B023
            )
            self._unwritten.popleft()
