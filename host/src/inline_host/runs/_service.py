"""Runs as a service: durable submission, a queue, concurrent execution, events, takes, resume.

Every accepted run is stored (request included) before the response; after a restart, runs
that were queued or running are queued again and re-planned, and every output already stored
by cache key is reused, so only what is missing runs again (a request-scoped run, whose client
went with the old process, is settled cancelled instead). Up to ``settings.max_runs`` runs
execute at once; a run waits for another only where both need the same node slot
(``concurrency``), and there the earlier run goes first.
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.abc
import msgspec
from inline_core import (
    DocumentInvalid,
    InlineCoreError,
    NodeFailed,
    RequestInvalid,
)
from msgspec import UNSET

from .._errors import InlineHostError
from ..guard import MAX_NESTING, too_deep
from ._engine import Engine
from ._events import (
    CancelledEvent,
    ErrorEvent,
    RunDoneEvent,
    RunStartedEvent,
    Subscriber,
)
from ._execution import failure_message, node_path, take_view
from ._gate import STORAGE_ERRORS, StorageFailing, StoreGate
from ._live import TERMINAL, LiveRun
from ._queue import WakingQueue
from ._store import RunStore, StoredRun, TakeRecord, now_ms
from ._stored import identify, new_run_id, stored_state
from ._takes import TakeRecorder, TakeWriter
from ._views import NodeFailure, RunError, RunState, RunSummary, Take

__all__ = ("TERMINAL", "Conflict", "LiveRun", "QueueFull", "RunService", "StorageFailing")

log = logging.getLogger("inline.runs")


class Conflict(InlineHostError):
    """A ``clientRunId`` was reused with a different graph."""


class QueueFull(InlineHostError):
    """``INLINE_MAX_QUEUED`` runs are waiting already (answered 429 with ``Retry-After``)."""

    retry_after = 5


#: The state a request-scoped run settles in after a restart, instead of being resumed.
NOT_RESUMED: Final = {"fraction": 0.0, "nodes": {}, "error": {"nodeId": None,
                      "message": "Not resumed after a restart: its client is gone."}}  # fmt: skip


class RunService:
    """Accepts, stores, queues, executes and reports runs."""

    def __init__(
        self,
        engine: Engine,
        store: RunStore,
        *,
        max_concurrent: int | None = None,
        keep_finished: int = 2000,
    ) -> None:
        self.engine = engine
        self.store = store
        settings = engine.settings
        writer = TakeWriter(engine.blobs, settings.data_dir / "takes", settings.cwd)
        self.recorder = TakeRecorder(writer, store)
        self.runs: dict[str, LiveRun] = {}
        self.queue: WakingQueue[LiveRun] = WakingQueue()
        self._client_ids: dict[str, tuple[str, str]] = {}  # clientRunId -> (run id, hash)
        self._finished: deque[str] = deque()  # finished runs kept in memory, oldest first
        self.keep_finished = keep_finished
        self._inflight_targets: dict[str, LiveRun] = {}
        self._leaders: set[LiveRun] = set()  # those of them that got followers (until settled)
        self._max = max(1, max_concurrent if max_concurrent is not None else settings.max_runs)
        self._tg: anyio.abc.TaskGroup | None = None
        self.on_settled: Callable[[LiveRun], None] | None = None
        self.gate = StoreGate(store)
        self._reserved = 0  # submits past the queue check, not queued yet

    # lifecycle --------------------------------------------------------------------------------
    async def start(self, tg: anyio.abc.TaskGroup) -> int:
        """Resume interrupted runs, then serve the queue; the number of runs resumed."""
        self._tg = tg
        resumed = 0
        for stored in self.store.unfinished():
            if stored.scoped:  # its client went with the process that answered its request
                self.store.settle(stored.run_id, "cancelled", dict(NOT_RESUMED))
                continue
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
            if run.client_run_id is not None:
                self._client_ids[run.client_run_id] = (run.id, run.request_hash)
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
    async def submit(self, body: Any, *, scoped: bool = False) -> tuple[str, str, bool]:
        """Accept a run request; (run id, status, created). Raises RequestInvalid, GraphInvalid,
        Conflict. ``scoped``: a run its request waits on (``/openai``), not resumed after a
        restart (its client is gone with the process that answered it).

        A run whose target is already in the output cache is settled before this returns (the
        contract's "instant graph"), in one transaction; every other run is stored as queued
        first, so an accepted run survives any crash.
        """
        if not isinstance(body, dict):
            raise RequestInvalid.of("The request body must be a JSON object.", "$")
        if too_deep(body):
            raise RequestInvalid.of(f"The request nests deeper than {MAX_NESTING} levels.", "$")
        # off the event loop where planning reads files (guard.InputPaths, model stamps)
        if self.engine.reads_files(body):
            planned = await anyio.to_thread.run_sync(self.engine.prepare, body)
        else:
            planned = self.engine.prepare(body)
        target = planned.target
        req_hash, stored_graph = identify(body["graph"], planned)
        client = body.get("clientRunId")
        client_key = None if client is None else msgspec.json.encode(client).decode()
        if client_key is not None:
            seen = self._client_ids.get(client_key) or await self.gate.call(
                self.store.find_client_run, client_key
            )
            if seen is not None:
                existing_id, existing_hash = seen
                if existing_hash == req_hash:
                    state = self.state(existing_id)
                    return existing_id, state.status if state else "queued", False
                raise Conflict(f"clientRunId {client!r} was reused with a different graph.")
        # followers wait on leaders in flight (a finished leader's were run after it)
        inflight = self._inflight_targets
        waiting = len(self.queue) + sum(
            len(r.followers) for r in self._leaders if inflight.get(r.target_key) is r
        )
        waiting += self._reserved  # passed this check, not queued yet (no await until here)
        if waiting >= self.engine.settings.max_queued:
            raise QueueFull(
                f"{waiting} runs are queued already (INLINE_MAX_QUEUED="
                f"{self.engine.settings.max_queued}); retry later."
            )
        stored_request = {"graph": stored_graph, "target": target}
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
            scoped=scoped,
        )
        if planned.node(target).key in self.engine.cache:
            self._remember(run)
            run.unsaved = row  # written once, settled, by _settle
            await self._execute(run)
            return run.id, run.status, True
        self._remember(run)  # first: a concurrent retry of its clientRunId finds it
        self._reserved += 1  # its queue place, held while it is stored (the check is atomic)
        try:
            await self.gate.call(self.store.add_run, row)
        except StorageFailing:
            self.runs.pop(run.id, None)
            if client_key is not None:
                self._client_ids.pop(client_key, None)
            raise
        finally:
            self._reserved -= 1
        self._enqueue(run)
        return run.id, run.status, True

    def chosen_secrets(self, body: Any) -> list[str]:
        """``node.param`` of every secret param (``*_secret``) the request sets to another
        secret than the node's own default: naming a secret is the operator's to do."""
        graph = body.get("graph") if isinstance(body, dict) else None
        nodes = graph.get("nodes") if isinstance(graph, dict) else None
        found: list[str] = []
        for node in nodes if isinstance(nodes, list) else []:
            if not isinstance(node, dict) or not isinstance(node.get("params"), dict):
                continue
            entry = self.engine.registry.lookup(str(node.get("type")))
            if entry is None:
                continue
            for field in entry.descriptor.params:
                value = node["params"].get(field.key)
                if field.key.endswith("_secret") and value not in (None, field.default):
                    found.append(f"{node.get('id')}.{field.key}")
        return found

    @property
    def storage_error(self) -> str | None:
        """Why the store is failing now (None while it works): health reports it."""
        return self.gate.error

    async def storage_status(self) -> str | None:
        """Why the store is failing, probing it again (health recovers by itself)."""
        return await self.gate.status()

    def _remember(self, run: LiveRun) -> None:
        self.runs[run.id] = run
        if run.client_run_id is not None:
            self._client_ids[run.client_run_id] = (run.id, run.request_hash)

    def _enqueue(self, run: LiveRun) -> None:
        leader = self._inflight_targets.get(run.target_key)
        if leader is not None and not leader.finished and leader is not run:
            leader.followers.append(run)  # identical work in flight: settle right after it
            self._leaders.add(leader)
            return
        self._inflight_targets[run.target_key] = run
        self.queue.put(run)

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
        """Unfinished runs in submission order; queued ones with their 0-based position in the
        queue (0 starts next)."""
        positions = {run.id: i for i, run in enumerate(self.queue)}
        for follower in (f for r in self.runs.values() for f in r.followers):
            positions.setdefault(follower.id, len(positions))
        out = []
        for run in sorted((r for r in self.runs.values() if not r.finished), key=lambda r: r.order):
            queued = run.status == "queued"
            out.append(
                RunSummary(
                    run_id=run.id,
                    status=run.status,
                    target=run.target,
                    fraction=run.fraction(),
                    queue_position=positions.get(run.id) if queued else None,
                )
            )
        return out

    def listed(self, statuses: tuple[str, ...], limit: int) -> list[RunSummary]:
        """Runs whose status is one of ``statuses``, finished ones too, newest first, at most
        ``limit``: the store's rows, with the live state of runs still in memory."""
        positions = {run.id: i for i, run in enumerate(self.queue)}
        wanted = set(statuses)
        rows = self.store.recent(tuple(wanted | {"queued", "running"}), limit + len(self.runs))
        out = []
        for run_id, status, target, fraction in rows:
            run = self.runs.get(run_id)
            if run is not None:
                status, fraction = run.status, run.fraction()
            if status not in wanted:
                continue
            queued = status == "queued" and run is not None
            out.append(
                RunSummary(
                    run_id=run_id,
                    status=status,
                    target=target,
                    fraction=fraction,
                    queue_position=positions.get(run_id) if queued else None,
                )
            )
            if len(out) == limit:
                break
        return out

    def load(self) -> dict[str, Any]:
        """Runs executing and queued now, the most at once, and node slots with waiters."""
        running = sum(1 for r in self.runs.values() if r.status == "running")
        return {
            "running": running,
            "queued": len(self.queue),
            "maxRuns": self._max,
            "waitingForSlots": self.engine.executor.slots.waiting(),
        }

    async def refresh(self) -> None:
        """Pick up packs installed from the CLI while serving (before validating a graph)."""
        await self.engine.refresh()

    def history(self, *, node_id: str | None, run_id: str | None, limit: int) -> list[Take]:
        """Take history, newest first."""
        records = self.store.history(node_id=node_id, run_id=run_id, limit=limit)
        return [take_view(t) for t in records]

    def take(self, take_id: str) -> TakeRecord | None:
        """A stored take (or one announced whose row goes in with its run's end)."""
        found = self.store.get_take(take_id)
        if found is None:  # rare: a 404, or a run whose end waits on a busy store
            unsettled = (r for r in self.runs.values() if r.unsaved_takes)
            found = next((t for r in unsettled for t in r.unsaved_takes if t.id == take_id), None)
        return found

    def take_file(self, record: TakeRecord) -> Path | None:
        """The file holding a media take's bytes, if present and whole (a small blob's bytes
        are checked against its hash, once per process: see ``BlobStore``). A text take's
        bytes are in the run store: ``take_text``."""
        return self.engine.blobs.sound_path(record.hash)

    def take_text(self, record: TakeRecord) -> bytes | None:
        """A text take's bytes: from its record (not stored yet), the run store, or the file an
        older host kept it in; None when they are gone."""
        if record.data is not None:
            return record.data
        data = self.store.take_text(record.hash)
        if data is None and (path := self.take_file(record)) is not None:
            data = path.read_bytes()
        return data

    def take_data(self, take_id: str) -> bytes:
        """A take's bytes (blocking I/O: call it in a worker thread)."""
        record = self.take(take_id)
        if record is not None and record.kind == "text":
            data = self.take_text(record)
        else:
            path = self.take_file(record) if record is not None else None
            data = path.read_bytes() if path is not None else None
        if data is None:
            raise LookupError(f"no bytes for take '{take_id}'")
        return data

    def put_asset(self, data: bytes) -> str:
        """Store uploaded bytes as an input asset (content-addressed); its id."""
        return self.engine.blobs.put_bytes(data)

    async def cancel(self, run_id: str) -> str | None:
        """Ask a run to stop (settles queued runs at once); the run's status after the request,
        or None for a run this process does not know."""
        run = self.runs.get(run_id)
        if run is None:
            stored = self.store.get_run(run_id)
            return None if stored is None else stored.status
        if run.finished:
            return run.status
        run.cancel_requested = True
        with contextlib.suppress(StorageFailing):
            await self.gate.call(self.store.mark_cancelled, run.id)  # a restart must not resume it
        if run.status == "queued":
            with contextlib.suppress(ValueError):
                self.queue.remove(run)
            for leader in self.runs.values():
                if run in leader.followers:
                    leader.followers.remove(run)
            await self._settle(run, "cancelled")
        elif run.scope is not None:
            run.scope.cancel()
        return "cancelled"

    async def settled(self, run_id: str) -> RunState | None:
        """The run's state once it has ended (at once if it already had; None if unknown)."""
        run = self.runs.get(run_id)
        if run is not None:
            await run.settled.wait()
        return self.state(run_id)

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
            run = await self.queue.take()
            await self._execute(run)
            for follower in run.followers:
                if not follower.finished:
                    await self._execute(follower)

    async def _execute(self, run: LiveRun) -> None:
        """Run ``run`` to its end. Never raises: whatever happens ends this run, not the
        executor."""
        try:
            await self._attempt(run)
        except Exception as exc:  # a bug of ours, or the store failing while settling
            log.exception("run %s: settling failed", run.id)
            if not run.finished:
                run.error = RunError(None, f"{type(exc).__name__}: {exc}")
                await self._settle(run, "error")

    async def _attempt(self, run: LiveRun) -> None:
        if run.cancel_requested:
            await self._settle(run, "cancelled")
            return
        run.status = "running"
        run.publish(RunStartedEvent(run_id=run.id))
        status = "error"  # unless the plan runs to its end
        error: RunError | None = None
        failed: dict[str, str] | None = None  # node id -> why, of each failed node
        try:
            if run.registry_version != self.engine.registry.version:
                await self._replan(run)  # nodes changed since submit: new versions, new cache keys
            self.engine.restore_stored(run.plan, self.store)
            engine = self.engine
            listener, executor = node_path(run, engine.executor, self.recorder, engine.bulk.buffer)
            with anyio.CancelScope() as scope:
                run.scope = scope
                await engine.run_plan(run.plan, listener, executor=executor)
            status = "cancelled" if scope.cancelled_caught else "done"
        except DocumentInvalid as exc:
            error = RunError(exc.node_id, str(exc))
        except NodeFailed as exc:
            failed = {f.node_id: failure_message(f) for f in exc.failures if f.node_id in run.nodes}
            errors = tuple(NodeFailure(n, m) for n, m in failed.items())
            error = RunError(exc.node_id, failure_message(exc), errors if len(errors) > 1 else None)
        except (InlineCoreError, InlineHostError) as exc:
            error = RunError(None, failure_message(exc))
        except STORAGE_ERRORS as exc:
            error = RunError(None, f"Storage failed: {exc}")
        finally:
            run.scope = None
        await self._end(run, status, error, failed)

    async def _end(
        self,
        run: LiveRun,
        status: str,
        error: RunError | None = None,
        failed: dict[str, str] | None = None,
    ) -> None:
        """The one way a run that started ends: its error set (when it failed), every node's
        real end told (``failed``: node id -> message, see ``LiveRun.close_nodes``), settled."""
        if error is not None:
            run.error = error
        run.close_nodes(failed)
        await self._settle(run, status)

    async def _replan(self, run: LiveRun) -> None:
        old_key = run.target_key
        run.use_plan(await anyio.to_thread.run_sync(self.engine.prepare, run.request))
        run.registry_version = self.engine.registry.version
        if self._inflight_targets.get(old_key) is run:
            del self._inflight_targets[old_key]
            self._inflight_targets[run.target_key] = run

    async def _settle(self, run: LiveRun, status: str) -> None:
        """End ``run`` as ``status``: durably when the store works, in memory always. An end
        the store refused is written once the store works again (so a restart never resumes
        a run that already ended)."""
        run.status = status
        new, takes = run.unsaved, tuple(run.unsaved_takes)
        exc = await self.gate.settle(run.id, status, lambda: msgspec.to_builtins(run.state()),
                                     new, takes)  # fmt: skip
        if exc is not None:
            log.error("run %s: cannot store its end (%s)", run.id, exc)
            if status != "error":
                run.status = status = "error"
                run.error = RunError(None, f"The run's result could not be stored: {exc}")
            self.gate.keep(run.id, status, msgspec.to_builtins(run.state()), new, takes)
        run.unsaved, run.unsaved_takes = None, []
        if status == "done":
            run.publish(RunDoneEvent(run_id=run.id))
        elif status == "cancelled":
            run.publish(CancelledEvent(run_id=run.id))
        else:
            err = run.error or RunError(None, "The run ended without a result.")
            errors = err.errors or UNSET  # only when more than one node failed
            run.publish(
                ErrorEvent(run_id=run.id, message=err.message, node_id=err.node_id, errors=errors)
            )
        if self._inflight_targets.get(run.target_key) is run:
            del self._inflight_targets[run.target_key]
        self._leaders.discard(run)
        run.settled.set()
        if self.on_settled is not None:
            self.on_settled(run)
        # finished runs stay readable from the store; memory keeps only the newest ones
        self._finished.append(run.id)
        while len(self._finished) > self.keep_finished:
            self.runs.pop(self._finished.popleft(), None)
