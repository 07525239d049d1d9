"""Runs as a service: durable submission, a FIFO queue, live state, events, takes and resume.

Every accepted run is stored (request included) before the response; after a restart, runs
that were queued or running are queued again and re-planned, and every output already stored
by cache key is reused, so only what is missing runs again.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import secrets
from collections import deque
from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc
import msgspec
from inline_core import (
    DocumentInvalid,
    InlineCoreError,
    NodeFailed,
    Plan,
    PlannedNode,
    RequestInvalid,
    parse_request,
    validate,
)
from inline_sdk.protocol import InlineBytes, MediaValue, Preview, Progress

from .._errors import InlineHostError, NodeError
from ..workers._supervisor import HostValue
from ._engine import Engine
from ._events import Broadcaster, Subscriber
from ._store import RunStore, StoredRun, TakeRecord, now_ms
from ._takes import TAKE_KINDS, TakeWriter
from ._views import NodeState, RunError, RunState, RunSummary, Take

TERMINAL = frozenset({"done", "error", "cancelled"})
PROGRESS_INTERVAL = 0.1  # the contract's <= 10 progress events per second per run
PREVIEW_INTERVAL = 0.25


class Conflict(InlineHostError):
    """A ``clientRunId`` was reused with a different graph."""


def new_run_id() -> str:
    """``run_`` + 12 lowercase hex."""
    return "run_" + secrets.token_hex(6)


def request_hash(graph: dict[str, Any], target: str) -> str:
    """The contract's identity of a submission (10.2): ids, types, params as sent, inputs."""
    nodes = []
    for node in graph.get("nodes") or []:
        inputs = node.get("inputs") or {}
        wired = {
            port: [[e.get("from"), e.get("output")] for e in (v if isinstance(v, list) else [v])]
            for port, v in sorted(inputs.items())
        }
        nodes.append([node.get("id"), node.get("type"), node.get("params") or {}, wired])
    canonical = msgspec.json.encode([target, nodes], order="sorted")
    return hashlib.sha256(canonical).hexdigest()


def take_view(t: TakeRecord) -> Take:
    """The /v1 shape of a stored take."""
    return Take(
        id=t.id,
        run_id=t.run_id,
        node_id=t.node_id,
        kind=t.kind,
        uri=t.uri,
        hash=t.hash,
        params=t.params,
        created_at=t.created_at,
    )


class LiveRun:
    """A run known to this process: its plan, live state and subscribers."""

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
        self.plan = plan
        self.target = plan.target
        self.client_run_id = client_run_id
        self.request_hash = req_hash
        self.created_at = created_at
        self.status = "queued"
        self.nodes = {n.id: NodeState(state="queued", fraction=0.0) for n in plan.nodes}
        self.takes: list[Take] = []
        self.error: RunError | None = None
        self.events = Broadcaster()
        self.settled = anyio.Event()
        self.cancel_requested = False
        self.scope: anyio.CancelScope | None = None
        self.followers: list[LiveRun] = []
        self._last_progress = 0.0
        self._last_preview = 0.0
        self.registry_version = ""
        self.unsaved: StoredRun | None = None

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
            nodes=self.nodes,
            takes=list(self.takes),
            error=self.error,
        )

    def add_takes(self, takes: list[Take]) -> None:
        known = {t.id for t in self.takes}
        self.takes.extend(t for t in takes if t.id not in known)

    def publish(self, payload: dict[str, Any], coalesce: str | None = None) -> None:
        self.events.publish({"type": payload.pop("type"), "runId": self.id, **payload}, coalesce)

    # progress from the scheduler ----------------------------------------------------------
    def on_progress(self, node_id: str, event: Progress) -> None:
        state = self.nodes.get(node_id)
        if state is None:
            return
        state.state = "running" if state.state == "queued" else state.state
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
        payload: dict[str, Any] = {
            "type": "progress",
            "nodeId": node_id,
            "phase": event.phase,
            "fraction": event.fraction,
            "status": event.status,
        }
        if event.step is not None:
            payload["step"], payload["stepCount"] = event.step, event.step_count
        self.publish(payload, coalesce=f"progress:{node_id}")

    def on_preview(self, node_id: str, event: Preview) -> None:
        now = anyio.current_time()
        if now - self._last_preview < PREVIEW_INTERVAL or not isinstance(
            event.image.data, InlineBytes
        ):
            return
        self._last_preview = now
        data = base64.b64encode(event.image.data.data).decode()
        self.publish(
            {
                "type": "preview",
                "nodeId": node_id,
                "image": f"data:image/{event.image.ext};base64,{data}",
            },
            coalesce=f"preview:{node_id}",
        )


class _Listener:
    """The kernel's RunListener for one live run."""

    def __init__(self, service: RunService, run: LiveRun) -> None:
        self.service = service
        self.run = run

    def node_started(self, node: PlannedNode) -> None:
        pass

    def node_progress(self, node_id: str, event: Any) -> None:
        if isinstance(event, Progress):
            self.run.on_progress(node_id, event)
        elif isinstance(event, Preview):
            self.run.on_preview(node_id, event)

    def node_finished(self, node: PlannedNode, outputs: dict[str, Any], cached: bool) -> None:
        if node.descriptor.output_kind is None:
            return  # take-less nodes are never announced (contract 4.2)
        records = self.service.store.takes_for_key(node.key)
        if not records:
            return
        takes = [take_view(t) for t in records]
        if cached:
            self.service.store.link_takes(self.run.id, [t.id for t in takes])
        state = self.run.nodes[node.id]
        state.state, state.fraction = ("cached", 1.0) if cached else ("done", 1.0)
        self.run.add_takes(takes)
        self.run.publish(
            {
                "type": "node_done",
                "nodeId": node.id,
                "cached": cached,
                "takes": [msgspec.to_builtins(t) for t in takes],
            }
        )


class _TakingExecutor:
    """Runs a node through the engine, then stores its media outputs as takes (durably)."""

    def __init__(self, service: RunService, run: LiveRun) -> None:
        self.service = service
        self.run = run

    async def execute(
        self, node: PlannedNode, inputs: dict[str, list[Any]], report: Any
    ) -> dict[str, Any]:
        engine = self.service.engine
        outputs = await engine.executor.execute(node, inputs, report)
        if node.descriptor.output_kind is not None:
            media = {
                port: hv
                for port, hv in outputs.items()
                if isinstance(hv.value, MediaValue) and hv.value.kind in TAKE_KINDS
            }
            if media:
                records = await anyio.to_thread.run_sync(self._write, node, media)
                self.service.store.add_takes(self.run.id, records)
        return outputs

    def _write(self, node: PlannedNode, media: dict[str, HostValue]) -> list[TakeRecord]:
        engine = self.service.engine
        records = []
        for port, hv in media.items():
            value = hv.value
            assert isinstance(value, MediaValue)
            records.append(
                self.service.writer.write(
                    run_id=self.run.id,
                    node_id=node.id,
                    node_type=node.type,
                    cache_key=node.key,
                    port=port,
                    value=value,
                    data=engine.read_bytes(hv),
                    params=node.params,
                    graph=self.run.request.get("graph"),
                )
            )
        return records


class RunService:
    """Accepts, stores, queues, executes and reports runs."""

    def __init__(
        self, engine: Engine, store: RunStore, *, max_concurrent: int = 1, keep_finished: int = 2000
    ) -> None:
        self.engine = engine
        self.store = store
        settings = engine.settings
        self.writer = TakeWriter(engine.blobs, settings.data_dir / "takes", settings.cwd)
        self.runs: dict[str, LiveRun] = {}
        self.queue: deque[LiveRun] = deque()
        self._queued = anyio.Event()
        self._client_ids: dict[str, tuple[str, str]] = {}  # clientRunId -> (run id, hash)
        self._finished: deque[str] = deque()  # finished runs kept in memory, oldest first
        self.keep_finished = keep_finished
        self._inflight_targets: dict[str, LiveRun] = {}
        self._max = max(1, max_concurrent)
        self._tg: anyio.abc.TaskGroup | None = None
        self.on_settled: Callable[[LiveRun], None] | None = None

    # lifecycle --------------------------------------------------------------------------------
    async def start(self, tg: anyio.abc.TaskGroup) -> int:
        """Resume interrupted runs, then serve the queue; the number of runs resumed."""
        self._tg = tg
        resumed = 0
        for stored in self.store.unfinished():
            try:
                run = self._live_from_store(stored)
            except InlineCoreError as exc:
                message = f"Could not resume after a restart: {exc}"
                self.store.settle(
                    stored.run_id,
                    "error",
                    {
                        "fraction": 0.0,
                        "nodes": {},
                        "error": {"nodeId": getattr(exc, "node_id", None), "message": message},
                    },
                )
                continue
            self.runs[run.id] = run
            self._enqueue(run)
            resumed += 1
        for i in range(self._max):
            tg.start_soon(self._serve, name=f"inline run executor {i}")
        return resumed

    def _live_from_store(self, stored: StoredRun) -> LiveRun:
        planned = self.engine.prepare(stored.request)
        run = LiveRun(
            stored.run_id,
            stored.request,
            planned,
            client_run_id=stored.client_run_id,
            req_hash=stored.request_hash,
            created_at=stored.created_at,
        )
        run.add_takes([take_view(t) for t in self.store.run_takes(stored.run_id)])
        run.registry_version = self.engine.registry.version
        return run

    # submit -----------------------------------------------------------------------------------
    async def submit(self, body: Any) -> tuple[str, str, bool]:
        """Accept a run request; (run id, status, created). Raises RequestInvalid, GraphInvalid,
        Conflict.

        A run whose target is already in the output cache is settled before this returns (the
        contract's "instant graph"), in one transaction; every other run is stored as queued
        first, so an accepted run survives any crash.
        """
        if not isinstance(body, dict):
            raise RequestInvalid.of("The request body must be a JSON object.", "$")
        planned = self.engine.prepare(body)
        graph_doc, target = body["graph"], planned.target
        req_hash = request_hash(graph_doc, target)
        client = body.get("clientRunId")
        client_key = None if client is None else msgspec.json.encode(client).decode()
        if client_key is not None and client_key in self._client_ids:
            existing_id, existing_hash = self._client_ids[client_key]
            if existing_hash == req_hash:
                state = self.state(existing_id)
                return existing_id, state.status if state else "queued", False
            raise Conflict(f"clientRunId {client!r} was reused with a different graph.")
        stored_request = {"graph": self._with_resolved_seeds(graph_doc, planned), "target": target}
        run = LiveRun(
            new_run_id(),
            stored_request,
            planned,
            client_run_id=client_key,
            req_hash=req_hash,
            created_at=now_ms(),
        )
        run.registry_version = self.engine.registry.version
        row = StoredRun(
            run_id=run.id,
            target=target,
            status="queued",
            request=stored_request,
            state=None,
            client_run_id=client_key,
            request_hash=req_hash,
            created_at=run.created_at,
        )
        self.runs[run.id] = run
        if client_key is not None:
            self._client_ids[client_key] = (run.id, req_hash)
        if planned.node(target).key in self.engine.cache:
            run.unsaved = row  # written once, settled, by _settle
            await self._execute(run)
            return run.id, run.status, True
        self.store.add_run(row)
        self._enqueue(run)
        return run.id, run.status, True

    def _with_resolved_seeds(self, graph: dict[str, Any], planned: Plan) -> dict[str, Any]:
        """The graph with random seeds replaced by the ones drawn, so a resume redraws none."""
        nodes = []
        for node in graph.get("nodes", []):
            if isinstance(node, dict) and node.get("id") in planned:
                p = planned.node(node["id"])
                seeds = {f.key for f in p.descriptor.params if f.widget == "seed"}
                if seeds:
                    params = dict(node.get("params") or {})
                    params.update({k: p.params[k] for k in seeds if k in p.params})
                    node = {**node, "params": params}
            nodes.append(node)
        return {**graph, "nodes": nodes}

    def _enqueue(self, run: LiveRun) -> None:
        leader = self._inflight_targets.get(run.plan.node(run.target).key)
        if leader is not None and not leader.finished and leader is not run:
            leader.followers.append(run)  # identical work in flight: settle right after it
            return
        self._inflight_targets[run.plan.node(run.target).key] = run
        self.queue.append(run)
        self._queued.set()

    # queries ----------------------------------------------------------------------------------
    def state(self, run_id: str) -> RunState | None:
        """The run's state: live, else from the store."""
        run = self.runs.get(run_id)
        if run is not None:
            return run.state()
        stored = self.store.get_run(run_id)
        if stored is None:
            return None
        return stored_state(stored, [take_view(t) for t in self.store.run_takes(run_id)])

    def live(self) -> list[RunSummary]:
        """Unfinished runs in submission order with their queue positions."""
        out, position = [], 0
        for run in sorted(
            (r for r in self.runs.values() if not r.finished), key=lambda r: r.created_at
        ):
            queued = run.status == "queued"
            out.append(
                RunSummary(
                    run_id=run.id,
                    status=run.status,
                    target=run.target,
                    fraction=run.fraction(),
                    queue_position=position if queued else None,
                )
            )
            position += queued
        return out

    def cancel(self, run_id: str) -> bool:
        """Ask a run to stop (settles queued runs at once); False for runs not in memory."""
        run = self.runs.get(run_id)
        if run is None:
            return False
        if run.finished:
            return True
        run.cancel_requested = True
        if run.status == "queued":
            with contextlib.suppress(ValueError):
                self.queue.remove(run)
            self._settle(run, "cancelled")
        elif run.scope is not None:
            run.scope.cancel()
        return True

    def subscribe(self, run_id: str) -> tuple[Subscriber | None, RunState] | None:
        """A subscription (None once finished) and the snapshot, registered in that order."""
        run = self.runs.get(run_id)
        if run is None:
            state = self.state(run_id)
            return None if state is None else (None, state)
        sub = None if run.finished else run.events.subscribe()
        return sub, run.state()

    def unsubscribe(self, run_id: str, sub: Subscriber) -> None:
        run = self.runs.get(run_id)
        if run is not None:
            run.events.unsubscribe(sub)

    # execution --------------------------------------------------------------------------------
    async def _serve(self) -> None:
        while True:
            while not self.queue:
                await self._queued.wait()
                self._queued = anyio.Event()
            run = self.queue.popleft()
            await self._execute(run)
            for follower in run.followers:
                if not follower.finished:
                    await self._execute(follower)

    async def _execute(self, run: LiveRun) -> None:
        if run.cancel_requested:
            self._settle(run, "cancelled")
            return
        run.status = "running"
        run.publish({"type": "run_started"})
        try:
            if run.registry_version != self.engine.registry.version:
                graph, target = parse_request(run.request)
                validate(graph, target, self.engine.registry)  # nodes changed since submit
            self.engine.restore_stored(run.plan, self.store)
            with anyio.CancelScope() as scope:
                run.scope = scope
                await self.engine.run_plan(
                    run.plan, _Listener(self, run), executor=_TakingExecutor(self, run)
                )
            if scope.cancelled_caught:
                self._settle(run, "cancelled")
            else:
                self._settle(run, "done")
        except DocumentInvalid as exc:
            run.error = RunError(exc.node_id, str(exc))
            self._settle(run, "error")
        except (InlineCoreError, InlineHostError) as exc:
            node_id = exc.node_id if isinstance(exc, NodeFailed) else None
            if node_id is not None and node_id in run.nodes:
                run.nodes[node_id].state = "error"
            run.error = RunError(node_id, _message(exc))
            self._settle(run, "error")
        except Exception as exc:  # a bug of ours must not kill the queue
            run.error = RunError(None, f"{type(exc).__name__}: {exc}")
            self._settle(run, "error")
        finally:
            run.scope = None

    def _settle(self, run: LiveRun, status: str) -> None:
        run.status = status
        state = run.state()
        self.store.settle(run.id, status, msgspec.to_builtins(state), new=run.unsaved)
        run.unsaved = None
        if status == "done":
            run.publish({"type": "run_done"})
        elif status == "cancelled":
            run.publish({"type": "cancelled"})
        else:
            err = run.error or RunError(None, "The run ended without a result.")
            run.publish({"type": "error", "message": err.message, "nodeId": err.node_id})
        key = run.plan.node(run.target).key
        if self._inflight_targets.get(key) is run:
            del self._inflight_targets[key]
        run.settled.set()
        if self.on_settled is not None:
            self.on_settled(run)
        # finished runs stay readable from the store; memory keeps only the newest ones
        self._finished.append(run.id)
        while len(self._finished) > self.keep_finished:
            self.runs.pop(self._finished.popleft(), None)


def stored_state(stored: StoredRun, takes: list[Take]) -> RunState:
    """The /v1 state of a run known only from the store."""
    state = stored.state or {}
    nodes = {k: msgspec.convert(v, NodeState) for k, v in (state.get("nodes") or {}).items()}
    err = state.get("error")
    return RunState(
        run_id=stored.run_id,
        status=stored.status,
        target=stored.target,
        fraction=float(state.get("fraction", 0.0)),
        nodes=nodes,
        takes=takes,
        error=RunError(err.get("nodeId"), err.get("message", "")) if err else None,
    )


def _message(exc: BaseException) -> str:
    cause = exc.__cause__ if isinstance(exc, NodeFailed) and exc.__cause__ else exc
    if isinstance(cause, NodeError):
        return cause.remote_message
    return str(cause) or type(cause).__name__
