"""A run known to this process: its plan, live state, streamed text and event subscribers."""

from __future__ import annotations

import base64
import itertools
from typing import Any

import anyio
from inline_core import Plan
from inline_sdk.protocol import InlineBytes, Preview, Progress, Stream
from msgspec import UNSET

from .._values import PREPARING
from ._events import (
    Broadcaster,
    DeltaEvent,
    NodeErrorEvent,
    PreviewEvent,
    ProgressEvent,
    RunEvent,
)
from ._store import StoredRun, TakeRecord
from ._views import NodeState, RunError, RunState, Take

TERMINAL = frozenset({"done", "error", "cancelled"})
PROGRESS_INTERVAL = 0.1  # the contract's <= 10 progress events per second per run
PREVIEW_INTERVAL = 0.25
#: Marks a node state whose streamed text lives in ``LiveRun._pieces`` (joined when read).
PARTIAL: dict[str, str] = {}
_order = itertools.count()


class LiveRun:
    """A run's live state. ``order`` ranks runs for node slots (earlier runs first)."""

    def __init__(
        self,
        run_id: str,
        request: dict[str, Any],
        plan: Plan,
        *,
        client_run_id: str | None,
        req_hash: str,
        created_at: int,
    ) -> None:
        self.id = run_id
        self.request = request
        self.order = next(_order)
        self.client_run_id = client_run_id
        self.request_hash = req_hash
        self.created_at = created_at
        self.status = "queued"
        self.takes: list[Take] = []
        self.error: RunError | None = None
        #: Each failed node's remote exception type (in memory only, never in /v1's JSON):
        #: what tells a user's mistake from a node's bug (``_errors.USER_MISTAKES``).
        self.failure_types: dict[str, str] = {}
        self.events = Broadcaster()
        self.settled = anyio.Event()
        self.cancel_requested = False
        self.scope: anyio.CancelScope | None = None
        self.followers: list[LiveRun] = []
        self.registry_version = ""
        self.unsaved: StoredRun | None = None
        #: The target's takes, whose files are written and whose rows go in with the run's end
        #: (one transaction: see ``TakingExecutor``).
        self.unsaved_takes: list[TakeRecord] = []
        self._last_progress = 0.0
        self._last_preview = 0.0
        self.plan = plan
        self.nodes: dict[str, NodeState] = {}
        #: Streamed text so far, per node and output (joined into ``partial`` when read).
        self._pieces: dict[str, dict[str, list[str]]] = {}
        self.use_plan(plan)

    def use_plan(self, plan: Plan) -> None:
        """Adopt ``plan`` (at creation, or re-planned after a registry change)."""
        self.plan = plan
        self.target = plan.target
        self.nodes = {n.id: NodeState(state="queued", fraction=0.0) for n in plan.nodes}

    @property
    def target_key(self) -> str:
        """The cache key of the run's target (what identical runs share)."""
        return self.plan.node(self.target).key

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL

    def fraction(self) -> float:
        if self.status == "done":
            return 1.0
        if not self.nodes:
            return 0.0
        parts = [1.0 if s.state in ("done", "cached") else s.fraction for s in self.nodes.values()]
        return sum(parts) / len(parts)

    def state(self) -> RunState:
        return RunState(
            run_id=self.id,
            status=self.status,
            target=self.target,
            fraction=self.fraction(),
            nodes={k: self._copy(k, v) for k, v in self.nodes.items()},
            takes=list(self.takes),
            error=self.error,
        )

    def add_takes(self, takes: list[Take]) -> None:
        known = {t.id for t in self.takes}
        self.takes.extend(t for t in takes if t.id not in known)

    def publish(self, event: RunEvent, coalesce: str | None = None) -> None:
        """Send ``event`` (one of this run's) to its subscribers."""
        self.events.publish(event, coalesce)

    # node states ------------------------------------------------------------------------------
    def node_running(self, node_id: str) -> None:
        state = self.nodes.get(node_id)
        if state is not None and state.state == "queued":
            state.state = "running"

    def node_finished(self, node_id: str, cached: bool) -> None:
        state = self.nodes.get(node_id)
        if state is not None:
            state.state, state.fraction = ("cached" if cached else "done"), 1.0
            state.partial = None  # the output is whole now (a take, or the node's value)
            if state.phase == PREPARING:  # its venv was built, then it said nothing more
                state.phase = state.status = None
            self._pieces.pop(node_id, None)

    def node_failed(self, node_id: str, message: str) -> None:
        """``node_id`` raised: its state says so (with why) at once, and readers are told."""
        state = self.nodes.get(node_id)
        if state is None:
            return
        state.state, state.error, state.partial = "error", message, None
        self._pieces.pop(node_id, None)
        self.publish(NodeErrorEvent(run_id=self.id, node_id=node_id, message=message))

    def close_nodes(self, failed: dict[str, str] | None = None) -> None:
        """At the end of a run, every node tells its real end: what never ran was ``skipped``
        (not needed, or upstream failed), what was running is ``cancelled``, each culprit in
        ``failed`` (node id -> message) is ``error``."""
        failed = failed or {}
        for node_id, state in self.nodes.items():
            if node_id in failed:
                state.state, state.error = "error", failed[node_id]
            elif state.state == "queued":
                state.state = "skipped"
            elif state.state == "running":
                state.state = "cancelled"
            state.partial = None
        self._pieces.clear()

    def _copy(self, node_id: str, state: NodeState) -> NodeState:
        """A node state safe to hand out, with its streamed text so far joined."""
        if state.partial is None:
            return state
        pieces = self._pieces.get(node_id, {})
        return NodeState(
            state=state.state,
            fraction=state.fraction,
            phase=state.phase,
            step=state.step,
            step_count=state.step_count,
            status=state.status,
            partial={port: "".join(parts) for port, parts in pieces.items()},
            error=state.error,
        )

    # events from the workers ------------------------------------------------------------------
    def on_progress(self, node_id: str, event: Progress) -> None:
        state = self.nodes.get(node_id)
        if state is None:
            return
        self.node_running(node_id)
        state.fraction = event.fraction
        state.phase = event.phase
        if event.step is not None:
            state.step, state.step_count = event.step, event.step_count
        if event.status:
            state.status = event.status
        now = anyio.current_time()
        if now - self._last_progress < PROGRESS_INTERVAL and event.fraction < 1.0:
            return
        self._last_progress = now
        steps = event.step is not None  # the pair is sent whole or not at all
        progress = ProgressEvent(
            run_id=self.id,
            node_id=node_id,
            phase=event.phase,
            fraction=event.fraction,
            status=event.status,
            step=event.step if event.step is not None else UNSET,
            step_count=event.step_count if steps else UNSET,
        )
        self.publish(progress, coalesce=f"progress:{node_id}")

    def on_preview(self, node_id: str, event: Preview) -> None:
        now = anyio.current_time()
        if now - self._last_preview < PREVIEW_INTERVAL or not isinstance(
            event.image.data, InlineBytes
        ):
            return
        self._last_preview = now
        data = base64.b64encode(event.image.data.data).decode()
        image = f"data:image/{event.image.ext};base64,{data}"
        self.publish(
            PreviewEvent(run_id=self.id, node_id=node_id, image=image),
            coalesce=f"preview:{node_id}",
        )

    def on_stream(self, node_id: str, event: Stream) -> None:
        """A piece of streamed text: kept for late readers' snapshots, sent to every reader
        (never throttled, coalesced or dropped)."""
        state = self.nodes.get(node_id)
        if state is None:
            return
        self.node_running(node_id)
        pieces = self._pieces.setdefault(node_id, {}).setdefault(event.port, [])
        pieces.append(event.text)
        state.partial = PARTIAL  # joined when a state is read: appending stays O(1)
        self.publish(
            DeltaEvent(run_id=self.id, node_id=node_id, output=event.port, text=event.text)
        )
