"""Running plans: cache hits, re-running only what changed, concurrency and failures."""

from __future__ import annotations

from collections import Counter
from typing import Any

import anyio
import pytest
from inline_core import (
    NodeFailed,
    NullListener,
    OutputCache,
    Plan,
    PlannedNode,
    ProgressSink,
    execute_plan,
    parse_graph,
    plan,
)

from ._nodes import catalog, edge

pytestmark = pytest.mark.anyio


class TextExecutor:
    """Runs input/text and text/join in memory, counting calls per node id."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    async def execute(
        self, node: PlannedNode, inputs: dict[str, list[Any]], report: ProgressSink
    ) -> dict[str, Any]:
        self.calls[node.id] += 1
        report.progress(node.id, {"step": 1, "total": 1})
        if node.type == "input/text":
            return {"text": node.params["text"]}
        (a,), (b,) = inputs["a"], inputs["b"]
        return {"text": a + node.params["separator"] + b}


class Recorder(NullListener):
    def __init__(self) -> None:
        self.events: list[tuple[str, str, Any]] = []

    def node_started(self, node: PlannedNode) -> None:
        self.events.append(("started", node.id, None))

    def node_progress(self, node_id: str, event: Any) -> None:
        self.events.append(("progress", node_id, event))

    def node_finished(self, node: PlannedNode, outputs: dict[str, Any], cached: bool) -> None:
        self.events.append(("finished", node.id, cached))

    def node_failed(self, node: PlannedNode, error: NodeFailed) -> None:
        self.events.append(("failed", node.id, str(error)))

    @property
    def failed(self) -> dict[str, str]:
        return {node_id: message for kind, node_id, message in self.events if kind == "failed"}

    def finished(self) -> dict[str, bool]:
        return {node_id: cached for kind, node_id, cached in self.events if kind == "finished"}


def text(node_id: str, value: str) -> dict[str, Any]:
    return {"id": node_id, "type": "input/text", "params": {"text": value}}


def join(node_id: str, a: str, b: str) -> dict[str, Any]:
    return {
        "id": node_id,
        "type": "text/join",
        "inputs": {"a": edge(a, "text"), "b": edge(b, "text")},
    }


def make_plan(*nodes: dict[str, Any], target: str) -> Plan:
    return plan(parse_graph({"schemaVersion": 1, "nodes": list(nodes)}), target, catalog())


def chain(b_text: str = "b") -> Plan:
    """x="a", y=b_text, xy = x+y, top = xy+x."""
    return make_plan(
        text("x", "a"),
        text("y", b_text),
        join("xy", "x", "y"),
        join("top", "xy", "x"),
        target="top",
    )


async def test_runs_in_order_and_returns_the_target_outputs() -> None:
    executor, listener = TextExecutor(), Recorder()
    outputs = await execute_plan(chain(), executor, OutputCache(), listener)
    assert outputs == {"text": "a b a"}
    assert executor.calls == Counter({"x": 1, "y": 1, "xy": 1, "top": 1})
    assert listener.finished() == {"x": False, "y": False, "xy": False, "top": False}
    assert ("progress", "xy", {"step": 1, "total": 1}) in listener.events
    started = [node_id for kind, node_id, _ in listener.events if kind == "started"]
    assert started.index("xy") > max(started.index("x"), started.index("y"))
    assert started.index("top") > started.index("xy")


async def test_changing_one_param_reruns_only_it_and_its_dependants() -> None:
    executor, cache = TextExecutor(), OutputCache()
    await execute_plan(chain(), executor, cache, NullListener())
    listener = Recorder()
    outputs = await execute_plan(chain("B"), executor, cache, listener)
    assert outputs == {"text": "a B a"}
    assert executor.calls == Counter({"x": 1, "y": 2, "xy": 2, "top": 2})
    assert listener.finished() == {"x": True, "y": False, "xy": False, "top": False}

    listener = Recorder()
    assert await execute_plan(chain("B"), executor, cache, listener) == {"text": "a B a"}
    assert executor.calls == Counter({"x": 1, "y": 2, "xy": 2, "top": 2})
    assert set(listener.finished().values()) == {True}
    assert not any(kind == "started" for kind, _, _ in listener.events)


async def test_independent_nodes_run_concurrently() -> None:
    arrived = {"x": anyio.Event(), "y": anyio.Event()}

    class Rendezvous(TextExecutor):
        async def execute(
            self, node: PlannedNode, inputs: dict[str, list[Any]], report: ProgressSink
        ) -> dict[str, Any]:
            if node.id in arrived:
                arrived[node.id].set()
                other = "y" if node.id == "x" else "x"
                with anyio.fail_after(5):  # only reachable if the other node runs meanwhile
                    await arrived[other].wait()
            return await super().execute(node, inputs, report)

    plan_ = make_plan(text("x", "a"), text("y", "b"), join("xy", "x", "y"), target="xy")
    assert await execute_plan(plan_, Rendezvous(), OutputCache(), NullListener()) == {"text": "a b"}


async def test_a_failure_names_the_node_and_lets_calls_in_flight_end() -> None:
    """y fails while x is running: x runs to its end (cached for the retry), nothing downstream
    starts, and the run raises y's failure alone."""
    x_running, y_failed = anyio.Event(), anyio.Event()

    class Failing(TextExecutor):
        async def execute(
            self, node: PlannedNode, inputs: dict[str, list[Any]], report: ProgressSink
        ) -> dict[str, Any]:
            if node.id == "x":
                x_running.set()
                await y_failed.wait()
                return await super().execute(node, inputs, report)
            await x_running.wait()
            y_failed.set()
            raise ValueError("model file missing")

    executor, cache, listener = Failing(), OutputCache(), Recorder()
    plan_ = chain()
    with anyio.fail_after(5), pytest.raises(NodeFailed) as info:
        await execute_plan(plan_, executor, cache, listener)
    error = info.value
    assert (error.node_id, error.node_type) == ("y", "input/text")
    assert str(error) == "model file missing"
    assert isinstance(error.cause, ValueError) and error.__cause__ is error.cause
    assert error.siblings == () and error.failures == (error,)
    assert listener.finished() == {"x": False}  # finished, and kept for the retry
    assert listener.failed == {"y": "model file missing"}
    assert executor.calls == Counter({"x": 1})  # xy and top never started
    assert not any(cache.is_pinned(n.key) for n in plan_.nodes)
    assert plan_.node("x").key in cache and len(cache) == 1


async def test_every_sibling_failure_is_reported_and_no_group_escapes() -> None:
    """Three independent loaders that all fail at once (a user without weights): one
    ``NodeFailed`` naming the first, the other two as its siblings, each heard by the
    listener; never an exception group."""
    arrived: list[str] = []
    all_in = anyio.Event()

    class AllFail(TextExecutor):
        async def execute(
            self, node: PlannedNode, inputs: dict[str, list[Any]], report: ProgressSink
        ) -> dict[str, Any]:
            arrived.append(node.id)
            if len(arrived) == 3:
                all_in.set()
            await all_in.wait()  # all three fail in the same instant
            raise FileNotFoundError(f"{node.id}.safetensors is missing")

    plan_ = make_plan(
        text("a", "1"),
        text("b", "2"),
        text("c", "3"),
        join("ab", "a", "b"),
        join("abc", "ab", "c"),
        target="abc",
    )
    listener = Recorder()
    with anyio.fail_after(5), pytest.raises(NodeFailed) as info:
        await execute_plan(plan_, AllFail(), OutputCache(), listener)
    failures = info.value.failures
    assert sorted(f.node_id for f in failures) == ["a", "b", "c"]
    assert all(str(f) == f"{f.node_id}.safetensors is missing" for f in failures)
    assert info.value.siblings == failures[1:]
    assert listener.failed == {n: f"{n}.safetensors is missing" for n in "abc"}
    assert listener.finished() == {}


async def test_a_listener_bug_surfaces_as_itself() -> None:
    class Broken(NullListener):
        def node_finished(self, node: PlannedNode, outputs: dict[str, Any], cached: bool) -> None:
            raise KeyError("listener bug")

    plan_ = make_plan(text("x", "a"), text("y", "b"), join("xy", "x", "y"), target="xy")
    with anyio.fail_after(5), pytest.raises(KeyError, match="listener bug"):
        await execute_plan(plan_, TextExecutor(), OutputCache(), Broken())


async def test_cancelling_a_run_cancels_its_calls_in_flight() -> None:
    cancelled = anyio.Event()
    running = anyio.Event()

    class Blocking(TextExecutor):
        async def execute(
            self, node: PlannedNode, inputs: dict[str, list[Any]], report: ProgressSink
        ) -> dict[str, Any]:
            try:
                running.set()
                await anyio.Event().wait()  # never set: only cancellation ends it
            finally:
                cancelled.set()
            raise AssertionError("unreachable")

    async with anyio.create_task_group() as tg:
        tg.start_soon(execute_plan, chain(), Blocking(), OutputCache(), NullListener())
        with anyio.fail_after(5):
            await running.wait()
        tg.cancel_scope.cancel()
    assert cancelled.is_set()


async def test_kernel_errors_and_messageless_errors() -> None:
    class Raising(TextExecutor):
        def __init__(self, exc: Exception) -> None:
            super().__init__()
            self.exc = exc

        async def execute(
            self, node: PlannedNode, inputs: dict[str, list[Any]], report: ProgressSink
        ) -> dict[str, Any]:
            raise self.exc

    plan_ = make_plan(text("x", "a"), target="x")
    with pytest.raises(NodeFailed, match=r"^MemoryError$"):
        await execute_plan(plan_, Raising(MemoryError()), OutputCache(), NullListener())
    original = NodeFailed("elsewhere", "t", KeyError("k"))
    with pytest.raises(NodeFailed) as info:
        await execute_plan(plan_, Raising(original), OutputCache(), NullListener())
    assert info.value is original


async def test_missing_output_fails_the_node() -> None:
    class Empty(TextExecutor):
        async def execute(
            self, node: PlannedNode, inputs: dict[str, list[Any]], report: ProgressSink
        ) -> dict[str, Any]:
            return {}

    with pytest.raises(NodeFailed, match="returned no value for output 'text'") as info:
        await execute_plan(
            make_plan(text("x", "a"), target="x"), Empty(), OutputCache(), NullListener()
        )
    assert info.value.node_id == "x"


async def test_keys_are_pinned_while_the_run_needs_them() -> None:
    evicted: list[str] = []
    cache = OutputCache(max_entries=1, on_evict=lambda key, outputs: evicted.append(key))
    plan_ = chain()
    keys = {n.id: n.key for n in plan_.nodes}

    class Checking(TextExecutor):
        async def execute(
            self, node: PlannedNode, inputs: dict[str, list[Any]], report: ProgressSink
        ) -> dict[str, Any]:
            assert all(cache.is_pinned(k) for k in keys.values())
            return await super().execute(node, inputs, report)

    assert await execute_plan(plan_, Checking(), cache, NullListener()) == {"text": "a b a"}
    assert len(cache) == 1 and keys["top"] in cache
    assert sorted(evicted) == sorted(k for n, k in keys.items() if n != "top")


async def test_identical_nodes_run_once() -> None:
    executor, listener = TextExecutor(), Recorder()
    plan_ = make_plan(text("x", "same"), text("y", "same"), join("xy", "x", "y"), target="xy")
    assert plan_.node("x").key == plan_.node("y").key
    assert await execute_plan(plan_, executor, OutputCache(), listener) == {"text": "same same"}
    assert executor.calls["x"] + executor.calls["y"] == 1
    assert sorted(listener.finished().items()) == sorted(
        {"xy": False, "x": executor.calls["x"] == 0, "y": executor.calls["y"] == 0}.items()
    )


async def test_nothing_upstream_of_a_cached_node_runs_again() -> None:
    executor, cache = TextExecutor(), OutputCache(max_entries=10)
    first = chain()
    await execute_plan(first, executor, cache, NullListener())
    # only the target's output survives (an eviction, a restart with a durable store...)
    kept = cache.get(first.node("top").key)
    cache.clear()
    assert kept is not None
    cache.put(first.node("top").key, kept)
    listener = Recorder()
    assert await execute_plan(chain(), executor, cache, listener) == {"text": "a b a"}
    assert executor.calls == Counter({"x": 1, "y": 1, "xy": 1, "top": 1})
    assert listener.finished() == {"top": True}
