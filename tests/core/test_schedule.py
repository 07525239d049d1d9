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
    StaleInput,
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


async def test_a_failure_names_the_node_and_cancels_the_rest() -> None:
    cancelled = anyio.Event()
    blocked = anyio.Event()

    class Failing(TextExecutor):
        async def execute(
            self, node: PlannedNode, inputs: dict[str, list[Any]], report: ProgressSink
        ) -> dict[str, Any]:
            if node.id == "x":
                try:
                    blocked.set()
                    await anyio.Event().wait()  # never set: only cancellation ends it
                finally:
                    cancelled.set()
            await blocked.wait()
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
    assert cancelled.is_set()
    assert listener.failed == {"y": "model file missing"}
    assert not any(cache.is_pinned(n.key) for n in plan_.nodes)
    assert len(cache) == 0


def three_loaders() -> Plan:
    return make_plan(
        text("a", "1"),
        text("b", "2"),
        text("c", "3"),
        join("ab", "a", "b"),
        join("abc", "ab", "c"),
        target="abc",
    )


async def test_every_sibling_failure_is_reported_and_no_group_escapes() -> None:
    """Three independent loaders that all fail (a user without weights), one after another
    while the first failure's grace runs: one ``NodeFailed`` naming the first, the other two
    its siblings, each heard by the listener as it happened; never an exception group."""
    order = ["b", "c", "a"]
    turn = {n: anyio.Event() for n in order}

    class InTurn(TextExecutor):
        async def execute(
            self, node: PlannedNode, inputs: dict[str, list[Any]], report: ProgressSink
        ) -> dict[str, Any]:
            await turn[node.id].wait()
            nxt = order.index(node.id) + 1
            if nxt < len(order):
                turn[order[nxt]].set()  # the next one fails after this one
            raise FileNotFoundError(f"{node.id}.safetensors is missing")

    listener = Recorder()
    turn["b"].set()
    with anyio.fail_after(5), pytest.raises(NodeFailed) as info:
        await execute_plan(three_loaders(), InTurn(), OutputCache(), listener, sibling_grace=30)
    failures = info.value.failures
    assert [f.node_id for f in failures] == ["b", "c", "a"]
    assert all(str(f) == f"{f.node_id}.safetensors is missing" for f in failures)
    assert info.value.siblings == failures[1:]
    assert listener.failed == {n: f"{n}.safetensors is missing" for n in "abc"}
    assert listener.finished() == {}


async def test_a_sibling_still_running_after_the_grace_is_cancelled() -> None:
    """A failure's grace is for calls that end on their own: one that does not is cancelled
    once it is over, and the run ends with the failure alone."""
    running, cancelled = anyio.Event(), anyio.Event()

    class OneHolds(TextExecutor):
        async def execute(
            self, node: PlannedNode, inputs: dict[str, list[Any]], report: ProgressSink
        ) -> dict[str, Any]:
            if node.id == "a":
                try:
                    running.set()
                    await anyio.Event().wait()  # never set: only cancellation ends it
                finally:
                    cancelled.set()
            await running.wait()
            raise FileNotFoundError(f"{node.id} is missing")

    with anyio.fail_after(5), pytest.raises(NodeFailed) as info:
        await execute_plan(
            three_loaders(), OneHolds(), OutputCache(), Recorder(), sibling_grace=0.05
        )
    assert cancelled.is_set()
    assert sorted(f.node_id for f in info.value.failures) == ["b", "c"]


async def test_an_executor_may_answer_a_cancel_with_the_nodes_own_failure() -> None:
    """Without a grace, the first failure cancels the rest at once; a call whose node had
    failed already (its answer was in) reports that failure, not the cancel."""

    started: list[str] = []
    others_running = anyio.Event()

    class Answers(TextExecutor):
        async def execute(
            self, node: PlannedNode, inputs: dict[str, list[Any]], report: ProgressSink
        ) -> dict[str, Any]:
            if node.id == "b":
                await others_running.wait()
                raise FileNotFoundError("b is missing")
            try:
                started.append(node.id)
                if len(started) == 2:
                    others_running.set()
                await anyio.Event().wait()
            except anyio.get_cancelled_exc_class():
                pass  # the worker's own answer was a failure: report it, not the cancel
            raise FileNotFoundError(f"{node.id} is missing")

    with anyio.fail_after(5), pytest.raises(NodeFailed) as info:
        await execute_plan(three_loaders(), Answers(), OutputCache(), Recorder())
    assert info.value.node_id == "b"
    assert sorted(f.node_id for f in info.value.failures) == ["a", "b", "c"]


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


class Worker(TextExecutor):
    """Values carry the generation of the worker that made them; a worker takes only its own.
    ``die_before`` node ids: the worker dies just before their call (``always``: every call)."""

    def __init__(self, die_before: set[str], always: bool = False) -> None:
        super().__init__()
        self.generation = 1
        self.die_before = die_before
        self.always = always

    async def execute(
        self, node: PlannedNode, inputs: dict[str, list[Any]], report: ProgressSink
    ) -> dict[str, Any]:
        if node.id in self.die_before:
            self.generation += 1
            if not self.always:
                self.die_before.discard(node.id)
        stale = [
            (port, i)
            for port, values in inputs.items()
            for i, (gen, _) in enumerate(values)
            if gen != self.generation
        ]
        if stale:
            raise StaleInput(stale, f"made by a worker that is gone (now {self.generation})")
        plain = {port: [v for _, v in values] for port, values in inputs.items()}
        outputs = await super().execute(node, plain, report)
        return {port: (self.generation, v) for port, v in outputs.items()}


async def test_stale_inputs_have_their_producers_computed_again_then_the_node_runs() -> None:
    executor, cache, listener = Worker({"xy"}), OutputCache(), Recorder()
    plan_ = chain()
    outputs = await execute_plan(plan_, executor, cache, listener)
    assert outputs == {"text": (2, "a b a")}
    # xy's first call found x and y stale (and ran nothing): both ran again, then xy; top got
    # the new x
    assert executor.calls == Counter({"x": 2, "y": 2, "xy": 1, "top": 1})
    assert not listener.failed
    cached = [cache.get(n.key) for n in plan_.nodes]
    assert all(c is not None and c["text"][0] == 2 for c in cached)


async def test_stale_cached_outputs_leave_the_cache_and_are_made_again() -> None:
    executor, cache = Worker(set()), OutputCache()
    await execute_plan(chain(), executor, cache, NullListener())
    executor.generation += 1  # the worker died between two runs; the cache still holds its values
    changed = make_plan(
        text("x", "a"), text("y", "b"), join("xy", "x", "y"), join("top", "xy", "y"), target="top"
    )
    assert await execute_plan(changed, executor, cache, NullListener()) == {"text": (2, "a b b")}
    assert executor.calls == Counter({"x": 2, "y": 2, "xy": 2, "top": 2})


async def test_stale_twins_are_made_again_once() -> None:
    executor = Worker({"xy"})
    plan_ = make_plan(text("x", "same"), text("y", "same"), join("xy", "x", "y"), target="xy")
    assert await execute_plan(plan_, executor, OutputCache(), NullListener()) == {
        "text": (2, "same same")
    }
    assert executor.calls["x"] + executor.calls["y"] == 2


async def test_inputs_stale_again_and_again_fail_the_node_after_three_replans() -> None:
    executor, listener = Worker({"xy"}, always=True), Recorder()
    with anyio.fail_after(5), pytest.raises(NodeFailed) as info:
        await execute_plan(chain(), executor, OutputCache(), listener)
    assert info.value.node_id == "xy"
    assert isinstance(info.value.cause, StaleInput)
    assert "gave up after computing 'x', 'y' again 3 times" in str(info.value)
    assert executor.calls == Counter({"x": 4, "y": 4})  # xy never got to run
    assert list(listener.failed) == ["xy"]
