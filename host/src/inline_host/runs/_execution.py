"""How a run's nodes execute inside the service: the kernel's listener and executor for one run.

The executor runs a node in its slot and records its takes durably before the node counts as
done; the listener turns the kernel's and the workers' events into the run's live state and
events, announcing each node's takes from what the recorder returned (``node_path`` builds the
pair, sharing that hand-off).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
from inline_core import NodeFailed, PlannedNode
from inline_sdk.protocol import MediaValue, Preview, Progress, Stream

from .._errors import NodeError
from ._engine import PackExecutor
from ._events import NodeDoneEvent
from ._live import LiveRun
from ._store import TakeRecord
from ._takes import (
    TakeRecorder,
    all_small_text,
    has_takes,
    take_bytes,
    take_ports,
    take_url,
)
from ._views import Take

#: Reads a media value's bytes (from shared memory without a copy where it can).
MediaReader = Callable[[MediaValue], bytes | memoryview]


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
        output=t.port,
        url=take_url(t.id),
    )


def failure_message(exc: BaseException) -> str:
    """What a run says of a failure: the node's own message (not the host's wrapping)."""
    cause = exc.__cause__ if isinstance(exc, NodeFailed) and exc.__cause__ else exc
    if isinstance(cause, NodeError):
        return cause.remote_message
    return str(cause) or type(cause).__name__


class RunListener:
    """The kernel's RunListener for one live run."""

    def __init__(
        self, run: LiveRun, recorder: TakeRecorder, recorded: dict[str, list[TakeRecord]]
    ) -> None:
        self.run = run
        self.recorder = recorder
        #: What the executor recorded for each node that ran, until the node is announced.
        self.recorded = recorded

    def node_started(self, node: PlannedNode) -> None:
        pass  # running once it holds its slot (the executor says so)

    def node_progress(self, node_id: str, event: Any) -> None:
        if isinstance(event, Stream):
            self.run.on_stream(node_id, event)
        elif isinstance(event, Progress):
            self.run.on_progress(node_id, event)
        elif isinstance(event, Preview):
            self.run.on_preview(node_id, event)

    def node_failed(self, node: PlannedNode, error: NodeFailed) -> None:
        if isinstance(error.cause, NodeError):
            self.run.failure_types[node.id] = error.cause.remote_type
        self.run.node_failed(node.id, failure_message(error))

    def node_finished(self, node: PlannedNode, outputs: dict[str, Any], cached: bool) -> None:
        run = self.run
        run.node_finished(node.id, cached)
        recorded = self.recorded.pop(node.id, [])
        if not has_takes(node, is_target=node.id == run.target):
            return  # take-less nodes are never announced (contract 4.2)
        # a cache hit links the takes stored for its key; a node that ran has those it recorded
        records = self.recorder.reuse(run.id, node) if cached else recorded
        if not records:
            return
        takes = [take_view(t) for t in records]
        run.add_takes(takes)
        run.publish(NodeDoneEvent(run_id=run.id, node_id=node.id, cached=cached, takes=takes))


class TakingExecutor:
    """Runs a node through the engine, in its node slot, then records its takes (durably)."""

    def __init__(
        self, run: LiveRun, executor: PackExecutor, recorder: TakeRecorder, read: MediaReader
    ) -> None:
        self.run = run
        self.executor = executor
        self.recorder = recorder
        self.read = read  # large takes go to disk from shared memory
        #: The takes recorded per node id, for the listener to announce.
        self.recorded: dict[str, list[TakeRecord]] = {}

    async def execute(
        self, node: PlannedNode, inputs: dict[str, list[Any]], report: Any
    ) -> dict[str, Any]:
        run = self.run
        outputs = await self.executor.execute(
            node, inputs, report, order=run.order, on_start=lambda: run.node_running(node.id)
        )
        ports = take_ports(node, outputs, is_target=node.id == run.target)
        if ports:
            values = {port: take_bytes(outputs[port].value, self.read) for port in ports}
            graph = run.request.get("graph")
            recorder = self.recorder
            if all_small_text(values):  # a small file and a row each: cheaper than a thread hop
                records = recorder.record(run.id, node, values, graph, rows=False)
                if node.id == run.target:
                    # the run's last node: its rows go in with the run's end, one transaction
                    # (nothing waits between here and there: no one sees the take unstored)
                    run.unsaved_takes.extend(records)
                elif not recorder.rows_now(run.id, records):
                    await anyio.to_thread.run_sync(recorder.store.add_takes, run.id, records)
            else:  # media bytes: written off the event loop
                records = await anyio.to_thread.run_sync(
                    lambda: recorder.record(run.id, node, values, graph)
                )
            self.recorded[node.id] = records
        return outputs


def node_path(
    run: LiveRun, executor: PackExecutor, recorder: TakeRecorder, read: MediaReader
) -> tuple[RunListener, TakingExecutor]:
    """The listener and the executor of one run's nodes (the executor hands the takes it
    recorded to the listener, which announces them)."""
    taking = TakingExecutor(run, executor, recorder, read)
    return RunListener(run, recorder, taking.recorded), taking
