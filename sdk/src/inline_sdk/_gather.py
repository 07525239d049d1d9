"""Gathering calls from different threads into batches (torch-free): ``inline_sdk.batch``.

A call ``submit``s a job under a compatibility key and blocks until its result. When the runner is
idle the caller leads: it waits up to ``window_s`` for more jobs of its key (0: never waits),
takes at most ``limit(key, jobs)`` of them and runs them as one batch. Jobs that arrive while a
batch runs wait, and the next leader takes them together. A batch that fails is retried one job at
a time (``alone``), so one bad item never fails the others.

A node that batches declares ``concurrency`` above 1 (the host then sends it that many calls at
once, each on a thread of its own) and submits each call's work to one ``Gatherer`` it keeps
with its model.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ._errors import Cancelled

R = TypeVar("R")
log = logging.getLogger("inline.batch")


@dataclass(eq=False)
class Job(Generic[R]):
    """One call's work, its result or error."""

    request: R
    result: Any = None
    error: BaseException | None = None
    finished: bool = False
    done: threading.Event = field(default_factory=threading.Event)

    def succeed(self, value: Any) -> None:
        self.result, self.finished = value, True
        self.done.set()

    def fail(self, error: BaseException) -> None:
        self.error, self.finished = error, True
        self.done.set()


@dataclass
class BatchStats:
    """Batches formed and their sizes (what ``/v1/health`` shows)."""

    batches: int = 0
    items: int = 0
    sizes: dict[str, int] = field(default_factory=dict)
    fallbacks: int = 0
    largest: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "batches": self.batches,
            "items": self.items,
            "sizes": dict(self.sizes),
            "largest": self.largest,
            "fallbacks": self.fallbacks,
        }


class Gatherer(Generic[R]):
    """Runs submitted jobs in batches, one batch at a time."""

    def __init__(
        self,
        run_batch: Callable[[list[Job[R]]], None],
        alone: Callable[[R], Any],
        *,
        key: Callable[[R], Hashable],
        limit: Callable[[R], int],
        window_s: float = 0.0,
        on_batch: Callable[[BatchStats], None] | None = None,
    ) -> None:
        self._run_batch = run_batch
        self._alone = alone
        self._key = key
        self._limit = limit
        self._window = max(0.0, window_s)
        self._on_batch = on_batch
        self._pending: dict[Hashable, list[Job[R]]] = {}
        self._busy = False
        self._cond = threading.Condition()
        self.stats = BatchStats()

    def submit(self, request: R) -> Any:
        """Run ``request`` (batched with compatible ones) and return its result."""
        job: Job[R] = Job(request)
        key = self._key(request)
        with self._cond:
            self._pending.setdefault(key, []).append(job)
            self._cond.notify_all()  # a leader in its window may be waiting for this one
            while not job.finished and self._busy:
                self._cond.wait()
            if not job.finished:
                self._busy = True
        if not job.finished:
            try:
                self._lead(key, job)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
        job.done.wait()
        if job.error is not None:
            raise job.error
        return job.result

    def _lead(self, key: Hashable, job: Job[R]) -> None:
        limit = max(1, self._limit(job.request))
        with self._cond:
            deadline = time.monotonic() + self._window
            while len(self._pending.get(key, [])) < limit:  # the window: only when asked for
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            queue = self._pending.get(key, [])
            others = [j for j in queue if j is not job][: limit - 1]
            batch = [job, *others]
            rest = [j for j in queue if j not in batch]
            if rest:
                self._pending[key] = rest
            else:
                self._pending.pop(key, None)
        self._run(batch)

    def _run(self, batch: list[Job[R]]) -> None:
        size = len(batch)
        s = self.stats
        s.batches += 1
        s.items += size
        s.sizes[str(size)] = s.sizes.get(str(size), 0) + 1
        s.largest = max(s.largest, size)
        if self._on_batch is not None:
            self._on_batch(s)
        if size == 1:
            self._one(batch[0])
            return
        try:
            self._run_batch(batch)
        except Exception as exc:  # the batch failed: each item alone (its own error, if any)
            log.warning("a batch of %d failed (%s): running its items one by one", size, exc)
            s.fallbacks += 1
            if self._on_batch is not None:
                self._on_batch(s)
            for job in batch:
                if not job.finished:
                    self._one(job)
        for job in batch:
            if not job.finished:
                job.fail(RuntimeError("the batch ended without a result for this item"))

    def _one(self, job: Job[R]) -> None:
        try:
            job.succeed(self._alone(job.request))
        except Cancelled as exc:
            job.fail(exc)
        except BaseException as exc:  # the item's own error crosses to its caller
            job.fail(exc)
