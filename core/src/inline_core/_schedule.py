"""Running a plan: every node as soon as its upstream nodes are done, independent nodes at once.

One anyio task per planned node waits for its dependencies, then takes its outputs from the
cache or asks the ``Executor`` for them. The first failure cancels the rest of the run and
propagates as itself (a ``NodeFailed`` naming the node), never as an exception group.
"""

from __future__ import annotations

from typing import Any, Protocol

import anyio

from ._cache import OutputCache
from ._errors import InlineCoreError, NodeFailed
from ._plan import Plan, PlannedNode

__all__ = (
    "Executor",
    "NullListener",
    "ProgressSink",
    "RunListener",
    "execute_plan",
)


class ProgressSink(Protocol):
    """Where an executor reports a running node's progress."""

    def progress(self, node_id: str, event: Any) -> None:
        """Pass ``event`` (opaque to the kernel) on for node ``node_id``."""
        ...


class Executor(Protocol):
    """Runs one node (the host sends it to the node's pack worker)."""

    async def execute(
        self, node: PlannedNode, inputs: dict[str, list[Any]], report: ProgressSink
    ) -> dict[str, Any]:
        """Run ``node`` on ``inputs`` (per input port, the upstream values in edge order) and
        return its value per output port."""
        ...


class RunListener(Protocol):
    """What a run tells its observer."""

    def node_started(self, node: PlannedNode) -> None:
        """``node`` was handed to the executor."""
        ...

    def node_progress(self, node_id: str, event: Any) -> None:
        """The executor reported ``event`` for a running node."""
        ...

    def node_finished(self, node: PlannedNode, outputs: dict[str, Any], cached: bool) -> None:
        """``node`` has its outputs, computed now or (``cached``) found in the cache."""
        ...


class NullListener:
    """A ``RunListener`` that ignores everything; subclass it to hear only some events."""

    def node_started(self, node: PlannedNode) -> None:
        """Ignore."""

    def node_progress(self, node_id: str, event: Any) -> None:
        """Ignore."""

    def node_finished(self, node: PlannedNode, outputs: dict[str, Any], cached: bool) -> None:
        """Ignore."""


async def execute_plan(
    plan: Plan, executor: Executor, cache: OutputCache, listener: RunListener
) -> dict[str, Any]:
    """Run ``plan`` and return the target node's outputs.

    Work is pulled from the target: a node whose key is cached is not executed, and neither is
    anything upstream of it that nothing else needs (a cached result needs no inputs). Independent
    upstream nodes run concurrently. Every computed node's outputs are stored in ``cache``; the
    plan's keys stay pinned until the run ends. A node that raises ends the run: the other nodes
    are cancelled and its exception propagates, wrapped in ``NodeFailed`` unless it already is an
    ``InlineCoreError``.
    """
    keys = [n.key for n in plan.nodes]
    for key in keys:
        cache.pin(key)
    try:
        run = _Run(executor, cache, listener, plan)
        try:
            return await run.pull(plan.target)
        except BaseExceptionGroup as group:
            sole = _sole(group)
            if sole is None:
                raise
            context = sole.__context__
            try:
                raise sole  # the group is an artefact of the task groups: keep the original
            finally:
                sole.__context__ = context
    finally:
        for key in keys:
            cache.unpin(key)


class _Run:
    """The state of one ``execute_plan`` call."""

    def __init__(
        self, executor: Executor, cache: OutputCache, listener: RunListener, plan: Plan
    ) -> None:
        self.executor = executor
        self.cache = cache
        self.listener = listener
        self.plan = plan
        self.sink = _Sink(listener)
        self.outputs: dict[str, dict[str, Any]] = {}
        self.started: dict[str, anyio.Event] = {}
        # Two nodes of one plan may share a key (the same computation twice): run it once.
        self.running: dict[str, anyio.Event] = {}
        self.by_key: dict[str, dict[str, Any]] = {}

    async def pull(self, node_id: str) -> dict[str, Any]:
        """The node's outputs: from the cache, or computed after pulling its inputs."""
        event = self.started.get(node_id)
        if event is not None:
            await event.wait()
            return self.outputs[node_id]
        event = self.started[node_id] = anyio.Event()
        node = self.plan.node(node_id)
        outputs = self.cache.get(node.key)
        cached = outputs is not None
        if outputs is None and (twin := self.running.get(node.key)) is not None:
            await twin.wait()
            outputs, cached = self.by_key[node.key], True
        if outputs is None:
            finished = self.running[node.key] = anyio.Event()
            async with anyio.create_task_group() as tg:
                for dep in node.deps:
                    tg.start_soon(self.pull, dep, name=f"inline node {dep}")
            outputs = await self._compute(node)
            finished.set()
        self.outputs[node_id] = outputs
        self.listener.node_finished(node, outputs, cached)
        event.set()
        return outputs

    async def _compute(self, node: PlannedNode) -> dict[str, Any]:
        inputs = {
            port: [self.outputs[edge.source][edge.output] for edge in edges]
            for port, edges in node.inputs.items()
        }
        self.listener.node_started(node)
        try:
            outputs = await self.executor.execute(node, inputs, self.sink)
            missing = [p.id for p in node.descriptor.outputs if p.id not in outputs]
            if missing:
                raise LookupError(f"{node.type!r} returned no value for output {missing[0]!r}.")
        except anyio.get_cancelled_exc_class():
            raise
        except InlineCoreError:
            raise
        except Exception as exc:
            raise NodeFailed(node.id, node.type, exc) from exc
        self.cache.put(node.key, outputs)
        self.by_key[node.key] = outputs
        return outputs


class _Sink:
    """The ``ProgressSink`` handed to the executor: forwards to the run's listener."""

    def __init__(self, listener: RunListener) -> None:
        self.listener = listener

    def progress(self, node_id: str, event: Any) -> None:
        self.listener.node_progress(node_id, event)


def _sole(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The one exception inside (possibly nested) single-member groups, else ``None``."""
    while len(group.exceptions) == 1:
        inner = group.exceptions[0]
        if not isinstance(inner, BaseExceptionGroup):
            return inner
        group = inner
    return None
