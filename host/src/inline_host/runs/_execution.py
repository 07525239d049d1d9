"""How a run's nodes execute inside the service: the kernel's listener and executor for one run.

The listener turns the kernel's and the workers' events into the run's live state and events;
the executor runs a node in its slot and records its takes durably before the node counts as
done.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import msgspec
from inline_core import NodeFailed, PlannedNode
from inline_sdk.protocol import Preview, Progress, Stream

from .._errors import NodeError
from ._live import LiveRun
from ._store import TakeRecord
from ._takes import has_takes, take_bytes, take_ports
from ._views import Take

if TYPE_CHECKING:  # the service builds these; they only call back into it
    from ._service import RunService


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


def failure_message(exc: BaseException) -> str:
    """What a run says of a failure: the node's own message (not the host's wrapping)."""
    cause = exc.__cause__ if isinstance(exc, NodeFailed) and exc.__cause__ else exc
    if isinstance(cause, NodeError):
        return cause.remote_message
    return str(cause) or type(cause).__name__


class RunListener:
    """The kernel's RunListener for one live run."""

    def __init__(self, service: RunService, run: LiveRun) -> None:
        self.service = service
        self.run = run

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
        if not has_takes(node, is_target=node.id == run.target):
            return  # take-less nodes are never announced (contract 4.2)
        recorder = self.service.recorder
        records = recorder.reuse(run.id, node) if cached else recorder.store.takes_for_key(node.key)
        if not records:
            return
        takes = [take_view(t) for t in records]
        run.add_takes(takes)
        run.publish(
            {
                "type": "node_done",
                "nodeId": node.id,
                "cached": cached,
                "takes": [msgspec.to_builtins(t) for t in takes],
            }
        )


class TakingExecutor:
    """Runs a node through the engine, in its node slot, then records its takes (durably)."""

    def __init__(self, service: RunService, run: LiveRun) -> None:
        self.service = service
        self.run = run

    async def execute(
        self, node: PlannedNode, inputs: dict[str, list[Any]], report: Any
    ) -> dict[str, Any]:
        service, run = self.service, self.run
        outputs = await service.engine.executor.execute(
            node, inputs, report, order=run.order, on_start=lambda: run.node_running(node.id)
        )
        ports = take_ports(node, outputs, is_target=node.id == run.target)
        if ports:
            read = service.engine.bulk.buffer  # large takes go to disk from shared memory
            values = {port: take_bytes(outputs[port].value, read) for port in ports}
            graph = run.request.get("graph")
            await anyio.to_thread.run_sync(
                lambda: service.recorder.record(run.id, node, values, graph)
            )
        return outputs
