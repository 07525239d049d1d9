"""Running a plan: every node as soon as its upstream nodes are done, independent nodes at once.

One anyio task per planned node waits for its dependencies, then takes its outputs from the
cache or asks the ``Executor`` for them. A failure starts nothing new, gives the calls in flight
a grace to end on their own, cancels what is left, and propagates as a ``NodeFailed`` naming the
first failed node, with the others that failed meanwhile in its ``siblings``: never as an
exception group.

An executor that finds some inputs unusable (``StaleInput``: engine handles of a worker that
died since they were made) has their producers computed again, then gets the call again; at
most ``MAX_REPLANS`` times per node, then the node fails with the ``StaleInput`` as its cause.
"""

from __future__ import annotations

from typing import Any, Final, Protocol

import anyio

from ._cache import OutputCache
from ._errors import NodeFailed, StaleInput
from ._plan import Plan, PlannedNode

__all__ = (
    "Executor",
    "NullListener",
    "ProgressSink",
    "RunListener",
    "execute_plan",
)

#: How many times one node may find its inputs stale (their producers computed again each
#: time) before it fails: a worker that dies again and again is not retried for ever.
MAX_REPLANS: Final = 3


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
        return its value per output port. Raise ``StaleInput`` naming the inputs that can no
        longer be used: the run computes their producers again and calls again."""
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

    def node_failed(self, node: PlannedNode, error: NodeFailed) -> None:
        """``node`` raised ``error``; the run's other calls in flight end or are cancelled."""
        ...


class NullListener:
    """A ``RunListener`` that ignores everything; subclass it to hear only some events."""

    def node_started(self, node: PlannedNode) -> None:
        """Ignore."""

    def node_progress(self, node_id: str, event: Any) -> None:
        """Ignore."""

    def node_finished(self, node: PlannedNode, outputs: dict[str, Any], cached: bool) -> None:
        """Ignore."""

    def node_failed(self, node: PlannedNode, error: NodeFailed) -> None:
        """Ignore."""


async def execute_plan(
    plan: Plan,
    executor: Executor,
    cache: OutputCache,
    listener: RunListener,
    *,
    sibling_grace: float = 0.0,
) -> dict[str, Any]:
    """Run ``plan`` and return the target node's outputs.

    Work is pulled from the target: a node whose key is cached is not executed, and neither is
    anything upstream of it that nothing else needs (a cached result needs no inputs). Independent
    upstream nodes run concurrently. Every computed node's outputs are stored in ``cache``; the
    plan's keys stay pinned until the run ends.

    A node that raises ends the run: nothing starts after it, and the other calls in flight get
    ``sibling_grace`` seconds to end on their own (independent loaders that all miss their
    files each report it) before they are cancelled; any of them that fails meanwhile is a
    failure too (also when the executor answers a cancel with the node's own error). The
    listener hears each failure as it happens (``node_failed``); then the first one propagates
    as a ``NodeFailed`` naming its node, with every other one in its ``siblings``. An exception
    group never escapes.
    """
    keys = [n.key for n in plan.nodes]
    for key in keys:
        cache.pin(key)
    try:
        run = _Run(executor, cache, listener, plan, sibling_grace)
        outputs: dict[str, Any] | None = None
        try:
            with run.scope:
                outputs = await run.pull(plan.target)
        except BaseExceptionGroup as group:
            raise _first_of(group) from None
        if outputs is None or run.failures:
            if not run.failures:
                raise RuntimeError(f"the run of {plan.target!r} ended without outputs or a failure")
            first, *others = run.failures
            first.siblings = tuple(others)
            raise first
        return outputs
    finally:
        for key in keys:
            cache.unpin(key)


class _Run:
    """The state of one ``execute_plan`` call."""

    def __init__(
        self,
        executor: Executor,
        cache: OutputCache,
        listener: RunListener,
        plan: Plan,
        sibling_grace: float = 0.0,
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
        #: Every node failure so far, in the order they happened.
        self.failures: list[NodeFailed] = []
        #: Cancelled once a node failed and the grace is over (its deadline): it ends every
        #: call in flight.
        self.scope = anyio.CancelScope()
        self.sibling_grace = sibling_grace

    async def pull(self, node_id: str) -> dict[str, Any] | None:
        """The node's outputs: from the cache, or computed after pulling its inputs; None when
        it could not run (it failed, something upstream failed, or another node did first)."""
        event = self.started.get(node_id)
        if event is not None:
            await event.wait()
            return self.outputs.get(node_id)
        event = self.started[node_id] = anyio.Event()
        try:
            node = self.plan.node(node_id)
            outputs = self.cache.get(node.key)
            cached = outputs is not None
            if outputs is None and (twin := self.running.get(node.key)) is not None:
                await twin.wait()
                outputs, cached = self.by_key.get(node.key), True
                if outputs is None:
                    return None  # the twin failed
            if outputs is None:
                finished = self.running[node.key] = anyio.Event()
                try:
                    outputs = await self._pull_inputs_and_compute(node)
                finally:
                    finished.set()
                if outputs is None:
                    return None
            self.outputs[node_id] = outputs
            self.listener.node_finished(node, outputs, cached)
            return outputs
        finally:
            event.set()

    async def _pull_inputs_and_compute(self, node: PlannedNode) -> dict[str, Any] | None:
        got: list[dict[str, Any] | None] = []

        async def pull_into(dep: str) -> None:
            got.append(await self.pull(dep))

        if len(node.deps) == 1:  # nothing to run beside it: no task group (and its tasks)
            await pull_into(node.deps[0])
        elif node.deps:
            async with anyio.create_task_group() as tg:
                for dep in node.deps:
                    tg.start_soon(pull_into, dep, name=f"inline node {dep}")
        if self.failures or any(outputs is None for outputs in got):
            return None  # nothing starts once the run has failed
        replans = 0
        while True:
            used = {dep: self.outputs.get(dep) for dep in node.deps}
            try:
                return await self._compute(node)
            except NodeFailed as failure:
                self._fail(node, failure)
                return None
            except StaleInput as stale:
                sources = _sources(node, stale)
                if replans >= MAX_REPLANS or not sources:
                    self._fail(
                        node, NodeFailed(node.id, node.type, _given_up(stale, sources, replans))
                    )
                    return None
                replans += 1
                if not await self._pull_again(sources, used):
                    return None

    def _fail(self, node: PlannedNode, failure: NodeFailed) -> None:
        self.failures.append(failure)
        self.listener.node_failed(node, failure)
        if len(self.failures) > 1:
            return  # the first failure ends the run already
        if self.sibling_grace <= 0:
            self.scope.cancel()
        else:  # the calls still in flight a grace after the first failure are cancelled
            self.scope.deadline = anyio.current_time() + self.sibling_grace

    async def _pull_again(
        self, sources: tuple[str, ...], used: dict[str, dict[str, Any] | None]
    ) -> bool:
        """Forget the outputs a consumer found stale (unless another consumer did already) and
        pull their nodes again; False when one of them could not run."""
        for source in sources:
            stale = used.get(source)
            if stale is not None and self.outputs.get(source) is stale:
                self._forget(source, stale)
        got: list[dict[str, Any] | None] = []

        async def pull_into(node_id: str) -> None:
            got.append(await self.pull(node_id))

        async with anyio.create_task_group() as tg:
            for source in sources:
                tg.start_soon(pull_into, source, name=f"inline node {source} (again)")
        return not self.failures and all(outputs is not None for outputs in got)

    def _forget(self, node_id: str, stale: dict[str, Any]) -> None:
        """Drop ``node_id``'s outputs from this run, its twins' record and the cache, so that
        the next ``pull`` computes it anew."""
        key = self.plan.node(node_id).key
        del self.outputs[node_id]
        self.started.pop(node_id, None)
        if self.by_key.get(key) is stale:
            del self.by_key[key]
            self.running.pop(key, None)
        self.cache.discard_where(lambda outputs: outputs is stale)

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
        except (NodeFailed, StaleInput):
            raise
        except Exception as exc:
            raise NodeFailed(node.id, node.type, exc) from exc
        self.cache.put(node.key, outputs)
        self.by_key[node.key] = outputs
        return outputs


def _sources(node: PlannedNode, stale: StaleInput) -> tuple[str, ...]:
    """The nodes that produced the inputs ``stale`` names (in edge order, once each)."""
    found: dict[str, None] = {}
    for port, index in stale.inputs:
        edges = node.inputs.get(port, ())
        if 0 <= index < len(edges):
            found[edges[index].source] = None
    return tuple(found)


def _given_up(stale: StaleInput, sources: tuple[str, ...], replans: int) -> StaleInput:
    """What a node fails with once its inputs were found stale too often."""
    if not replans:
        return stale
    who = ", ".join(f"'{s}'" for s in sources)
    given_up = StaleInput(
        stale.inputs, f"{stale.reason}; gave up after computing {who} again {replans} times"
    )
    given_up.__cause__ = stale
    return given_up


class _Sink:
    """The ``ProgressSink`` handed to the executor: forwards to the run's listener."""

    def __init__(self, listener: RunListener) -> None:
        self.listener = listener

    def progress(self, node_id: str, event: Any) -> None:
        self.listener.node_progress(node_id, event)


def _first_of(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first exception in a (possibly nested) group that is not a cancellation: a bug in a
    listener or an executor, surfaced as itself rather than as an artefact of task groups."""
    cancelled = anyio.get_cancelled_exc_class()
    leaves: list[BaseException] = []
    todo: list[BaseException] = [group]
    while todo:
        exc = todo.pop(0)
        if isinstance(exc, BaseExceptionGroup):
            todo[:0] = list(exc.exceptions)
        else:
            leaves.append(exc)
    return next((e for e in leaves if not isinstance(e, cancelled)), leaves[0])
