"""The requests waiting on each run: a run whose every request left without its answer is
cancelled.

A chat completion or an image request is a run its client waits on. When the client goes (a
dropped stream, a closed connection), nobody is left to read what the run makes, and it would
hold a run slot (and pay a hosted model's call) to its end. A retry of the request attaches to
the same run (``_attempts``), so one run may have several listeners: it is cancelled only once
the last one has left. A run still queued goes at once (a retry queues a new one, losing
nothing); a running one ``GRACE`` seconds later, if no request joined it meanwhile (an OpenAI
SDK retries a dropped connection after half a second to eight, and would find its work done).

Litestar answers a client's disconnect during a streamed response by cancelling the stream's
body; a response still waiting for its runs listens for the disconnect itself
(``until_answered``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
from litestar import Request
from litestar.datastructures import State

from ...runs import RunService
from ._schemas import OpenAIError
from ._state import app_object

__all__ = ("GRACE", "Lease", "Listeners", "client_gone", "provide_listeners", "until_answered")

#: Seconds a run no request listens to any more waits for a retry before it is cancelled.
GRACE: Final = 3.0
#: ASGI messages read while waiting for a disconnect (only the disconnect is expected).
MAX_MESSAGES: Final = 64
STATE_KEY: Final = "openai_listeners"


@dataclass(slots=True)
class Lease:
    """One request's hold on its runs, released once (``Listeners.leave``)."""

    run_ids: tuple[str, ...]
    released: bool = False


@dataclass(slots=True)
class _Listening:
    count: int = 0
    #: how many requests ever joined: a pending cancel checks that none joined since
    joined: int = 0
    leaving: set[int] = field(default_factory=set)


class Listeners:
    """How many requests listen to each run (only runs someone listens to, or just left)."""

    def __init__(self, grace: float = GRACE) -> None:
        self.grace = grace
        self._runs: dict[str, _Listening] = {}

    def join(self, run_ids: Iterable[str]) -> Lease:
        """A request starts waiting on ``run_ids``."""
        lease = Lease(tuple(dict.fromkeys(run_ids)))
        for run_id in lease.run_ids:
            listening = self._runs.setdefault(run_id, _Listening())
            listening.count += 1
            listening.joined += 1
        return lease

    def listening(self, run_id: str) -> int:
        """How many requests wait on ``run_id`` now."""
        found = self._runs.get(run_id)
        return found.count if found is not None else 0

    async def leave(self, service: RunService, lease: Lease) -> list[str]:
        """The request of ``lease`` stops waiting (a second call does nothing). Each of its runs
        that no other request waits on is cancelled: at once while queued, else if it is still
        running ``grace`` seconds later and no request joined it meanwhile; the ids of those
        cancelled. Shielded: a cancelled request (its client went) still lets go of its runs."""
        if lease.released:
            return []
        lease.released = True
        left: dict[str, int] = {}  # run id -> joins seen when its last listener left
        for run_id in lease.run_ids:
            listening = self._runs[run_id]
            listening.count -= 1
            if listening.count == 0:
                left[run_id] = listening.joined
                listening.leaving.add(listening.joined)
        cancelled = []
        with anyio.CancelScope(shield=True):
            for run_id in left:
                if _status(service, run_id) == "queued":
                    await service.cancel(run_id)
                    cancelled.append(run_id)
            with anyio.move_on_after(self.grace):  # a run that ends meanwhile needs no cancel
                for run_id in left:
                    await service.settled(run_id)
            for run_id, joined in left.items():
                listening = self._runs[run_id]
                listening.leaving.discard(joined)
                unheard = listening.count == 0 and listening.joined == joined
                if unheard and _status(service, run_id) in ("queued", "running"):
                    await service.cancel(run_id)
                    cancelled.append(run_id)
                if listening.count == 0 and not listening.leaving:
                    del self._runs[run_id]
        return cancelled


def _status(service: RunService, run_id: str) -> str | None:
    state = service.state(run_id)
    return state.status if state is not None else None


def provide_listeners(state: State) -> Listeners:
    """The app's ``Listeners`` (made on first use; one per app, shared by the /openai routes)."""
    return app_object(state, STATE_KEY, Listeners)


async def until_answered(
    service: RunService, run_ids: Iterable[str], request: Request[Any, Any, Any]
) -> bool:
    """Wait until every run of ``run_ids`` has ended (True), or the client has gone (False)."""
    gone = False

    async def settle(scope: anyio.CancelScope) -> None:
        for run_id in run_ids:
            await service.settled(run_id)
        scope.cancel()

    async def watch(scope: anyio.CancelScope) -> None:
        nonlocal gone
        for _ in range(MAX_MESSAGES):  # the body was read: what comes next is the disconnect
            message = await request.receive()
            if message["type"] == "http.disconnect":
                gone = True
                scope.cancel()
                return

    async with anyio.create_task_group() as tg:
        tg.start_soon(settle, tg.cancel_scope)
        tg.start_soon(watch, tg.cancel_scope)
    return not gone


def client_gone() -> OpenAIError:
    """What a request whose client went is answered (nobody reads it: nginx's 499)."""
    return OpenAIError(499, "The client closed the request before its answer.",
                       type="client_closed_request")  # fmt: skip
