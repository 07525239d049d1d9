"""Retries of one request attach to the runs of its first try instead of starting more.

OpenAI's SDKs retry an answer of 408, 409, 429 or 5xx (and a dropped connection) with the same
body, counting the tries in ``x-stainless-retry-count``; a client may send ``Idempotency-Key``
too. With a key, each run of the request gets a ``clientRunId`` made of the route, the key and
the body's hash, so the run service answers a repeat (even after a restart) with the runs it
made the first time. Without one, a retry (``x-stainless-retry-count`` of 1 or more) attaches to
the runs of the latest first try of the same body on the same route, made at most ``WINDOW``
seconds before; ``Attempts`` keeps the newest ``KEEP`` first tries in memory. The body is what
a retry is known by: an image without a seed draws its seed per run, so two runs of one request
never share a graph. A cancelled run has no answer to repeat (its client went, or the host
restarted under it: ``_listeners``): a retry that finds one makes a new run instead (with a key,
under the next of ``REDO`` ``clientRunId`` generations). Every run made here is request-scoped.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from litestar import Request
from litestar.datastructures import State

from ...runs import RunService
from ._state import app_object

__all__ = ("KEEP", "WINDOW", "Attempt", "Attempts", "provide_attempts", "submit_once")

#: First tries remembered for keyless retries (the oldest are forgotten first).
KEEP: Final = 1024
#: Seconds a first try stays findable: past the SDK's default timeout (600 s) and backoff.
WINDOW: Final = 900.0
#: Runs a keyed request makes again, at most, when each one it finds was cancelled.
REDO: Final = 8
STATE_KEY: Final = "openai_attempts"


@dataclass(frozen=True, slots=True)
class Attempt:
    """One request as its retries repeat it: route, body hash, key, and whether it is a retry."""

    route: str
    digest: str
    key: str | None
    retry: bool

    @classmethod
    def of(cls, route: str, request: Request[Any, Any, Any], raw: bytes) -> Attempt:
        """The attempt ``request`` (whose body is ``raw``) makes on ``route``."""
        key = request.headers.get("idempotency-key") or None
        try:
            retry = int(request.headers.get("x-stainless-retry-count") or 0) > 0
        except ValueError:
            retry = False
        return cls(route, hashlib.sha256(raw).hexdigest(), key, retry)

    def client_run_id(self, index: int, redo: int = 0) -> str | None:
        """The ``clientRunId`` of the request's run ``index`` (None without a key); ``redo``:
        how many runs of it were cancelled before."""
        if self.key is None:
            return None
        key = hashlib.sha256(self.key.encode()).hexdigest()[:32]
        again = f"~{redo}" if redo else ""
        return f"openai:{self.route}:{key}:{self.digest[:32]}:{index}{again}"


class Attempts:
    """The runs of recent first tries without a key, by route and body, for their retries."""

    def __init__(
        self,
        keep: int = KEEP,
        window: float = WINDOW,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.keep = keep
        self.window = window
        self.clock = clock
        self._tries: OrderedDict[tuple[str, str], tuple[float, list[str]]] = OrderedDict()

    def find(self, attempt: Attempt) -> list[str] | None:
        """The run ids of the first try ``attempt`` retries (None: not a keyless retry, or its
        first try is unknown or too old)."""
        if attempt.key is not None or not attempt.retry:
            return None
        self._forget_old()
        found = self._tries.get((attempt.route, attempt.digest))
        return list(found[1]) if found is not None else None

    def remember(self, attempt: Attempt, run_ids: list[str]) -> None:
        """Record the runs of ``attempt`` for its retries (a keyed one needs no record)."""
        if attempt.key is not None:
            return
        where = (attempt.route, attempt.digest)
        self._tries.pop(where, None)
        self._tries[where] = (self.clock(), list(run_ids))
        while len(self._tries) > self.keep:
            self._tries.popitem(last=False)
        self._forget_old()

    def _forget_old(self) -> None:
        horizon = self.clock() - self.window
        while self._tries:
            at, _ = next(iter(self._tries.values()))
            if at >= horizon:
                break
            self._tries.popitem(last=False)


def provide_attempts(state: State) -> Attempts:
    """The app's ``Attempts`` (made on first use; one per app, shared by the /openai routes)."""
    return app_object(state, STATE_KEY, Attempts)


async def submit_once(
    service: RunService, attempts: Attempts, attempt: Attempt, docs: list[dict[str, Any]]
) -> list[str]:
    """The run ids for ``docs`` (one run request each): those of the first try ``attempt``
    repeats, else new runs (with their ``clientRunId`` when the request has a key), scoped to
    the request. Raises what ``RunService.submit`` raises."""
    found = attempts.find(attempt)
    if found is not None and len(found) == len(docs) and all(_answers(service, r) for r in found):
        return found
    run_ids = []
    for i, doc in enumerate(docs):
        for redo in range(REDO):
            client_run_id = attempt.client_run_id(i, redo)
            body = doc if client_run_id is None else {**doc, "clientRunId": client_run_id}
            run_id, status, created = await service.submit(body, scoped=True)
            if created or status != "cancelled":
                break
        run_ids.append(run_id)
    attempts.remember(attempt, run_ids)
    return run_ids


def _answers(service: RunService, run_id: str) -> bool:
    """Whether a retry may attach to ``run_id``: it is known and not cancelled."""
    state = service.state(run_id)
    return state is not None and state.status != "cancelled"
