"""A run's path in the host, in memory: a node's takes are announced from what the recorder
returned (the store is not read again), a submission is walked once for its identity and the
graph it is stored as, and every PNG a run writes carries the one recipe chunk."""

from __future__ import annotations

import json
import struct
from types import SimpleNamespace
from typing import Any

import pytest
from inline_host import HostValue
from inline_host.runs import png_with_recipe
from inline_host.runs._events import NodeDoneEvent
from inline_host.runs._execution import node_path, take_view
from inline_host.runs._store import TakeRecord
from inline_host.runs._stored import identify
from inline_sdk.protocol import TextValue

RECORD = TakeRecord(id="take_0123456789ab", run_id="run_1", node_id="n", port="image",
                    kind="image", ext="png", uri="takes/take_0123456789ab.png", hash="sha256-1",
                    params={"seed": 3}, cache_key="k", created_at=1)  # fmt: skip


class Run:
    """What the listener and the executor use of a live run."""

    def __init__(self) -> None:
        self.id, self.target, self.order = "run_1", "n", 0
        self.request: dict[str, Any] = {"graph": {"schemaVersion": 1, "nodes": []}}
        self.finished: list[tuple[str, bool]] = []
        self.takes: list[Any] = []
        self.published: list[Any] = []
        self.unsaved_takes: list[Any] = []  # the target's, stored with the run's end

    def node_finished(self, node_id: str, cached: bool) -> None:
        self.finished.append((node_id, cached))

    def node_running(self, node_id: str) -> None:
        pass

    def add_takes(self, takes: list[Any]) -> None:
        self.takes.extend(takes)

    def publish(self, event: Any, coalesce: str | None = None) -> None:
        self.published.append(event)


class Recorder:
    """Records ``RECORD``; reading the store back is an error here."""

    def __init__(self) -> None:
        self.store = SimpleNamespace(takes_for_key=self._no_read)
        self.recorded: list[str] = []

    def _no_read(self, key: str) -> list[TakeRecord]:
        raise AssertionError("the store was read again for takes just recorded")

    def record(
        self, run_id: str, node: Any, values: dict[str, Any], graph: Any, *, rows: bool = True
    ) -> list[Any]:
        self.recorded.append(node.id)
        return [RECORD]

    def reuse(self, run_id: str, node: Any) -> list[TakeRecord]:
        return [RECORD]


class Executor:
    """The engine's executor: the node's one output is text."""

    async def execute(self, node: Any, inputs: Any, report: Any, **kw: Any) -> dict[str, Any]:
        kw["on_start"]()
        return {"text": HostValue(TextValue(text="hi"), "testpack", 0)}


@pytest.mark.anyio
async def test_a_node_that_ran_is_announced_with_the_takes_it_recorded() -> None:
    run, recorder = Run(), Recorder()
    listener, executor = node_path(run, Executor(), recorder, bytes)  # type: ignore[arg-type]
    node = SimpleNamespace(id="n", key="k", descriptor=SimpleNamespace(output_kind="text"))
    outputs = await executor.execute(node, {}, None)  # type: ignore[arg-type]
    assert recorder.recorded == ["n"]
    assert run.unsaved_takes == [RECORD]  # the target's rows go in with the run's end
    listener.node_finished(node, outputs, cached=False)  # type: ignore[arg-type]
    assert run.finished == [("n", False)]
    assert run.takes == [take_view(RECORD)]
    assert run.published == [
        NodeDoneEvent(run_id="run_1", node_id="n", cached=False, takes=[take_view(RECORD)])
    ]
    assert executor.recorded == {}  # handed over once


def test_a_node_that_recorded_nothing_is_not_announced() -> None:
    run = Run()
    listener, _ = node_path(run, None, Recorder(), bytes)  # type: ignore[arg-type]
    listener.node_finished(SimpleNamespace(id="n", key="k"), {}, cached=False)  # type: ignore[arg-type]
    assert run.published == []


GRAPH = {"schemaVersion": 1, "nodes": [
    {"id": "p", "type": "input/text", "params": {"text": "a red bicycle ü"}},
    {"id": "z", "type": "testpack/echo", "params": {"suffix": "!"},
     "inputs": {"text": {"from": "p", "output": "text"}}},
    {"id": "j", "type": "text/join", "inputs": {"b": [{"from": "z", "output": "text"}],
                                                "a": {"from": "p", "output": "text"}}},
]}  # fmt: skip


class Planned:
    """A plan of ``GRAPH`` whose ``z`` drew seed 42 (its ``seed`` param was -1)."""

    target = "j"

    def __contains__(self, node_id: object) -> bool:
        return node_id == "z"

    def node(self, node_id: str) -> Any:
        seed = SimpleNamespace(key="seed", widget="seed")
        return SimpleNamespace(descriptor=SimpleNamespace(params=[seed]), params={"seed": 42})


def test_a_submission_is_identified_as_before_and_stored_with_its_drawn_seeds() -> None:
    graph = json.loads(json.dumps(GRAPH))
    graph["nodes"][1]["params"]["seed"] = -1
    plain, _ = identify(GRAPH, Planned())  # type: ignore[arg-type]
    # the identity of contract 10.2, as every host before computed it (clientRunId replays)
    assert plain == "7e8e54266d3915fbd0a7eb1291fcf738ec93f781005907f8dea25a49b7de5060"
    seeded, stored = identify(graph, Planned())  # type: ignore[arg-type]
    assert seeded != plain  # params as sent
    assert stored["nodes"][1]["params"] == {"suffix": "!", "seed": 42}
    assert graph["nodes"][1]["params"]["seed"] == -1  # the request itself is left as it was
    assert stored["nodes"][0] is graph["nodes"][0]


def _chunks(png: bytes) -> dict[bytes, bytes]:
    out, at = {}, 8
    while at < len(png):
        (size,) = struct.unpack(">I", png[at : at + 4])
        out[png[at + 4 : at + 8]] = png[at + 8 : at + 8 + size]
        at += 12 + size
    return out


def test_the_recipe_chunk() -> None:
    ihdr = b"IHDR" + bytes(13)
    png = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + ihdr + bytes(4)
    out = png_with_recipe(memoryview(png), node_id="z", node_type="t/x", params={"a": "ü"},
                          graph=GRAPH)  # fmt: skip
    key, _, text = _chunks(out)[b"iTXt"].partition(b"\x00\x00\x00\x00\x00")
    assert key == b"inline"
    recipe = {"node": "z", "type": "t/x", "params": {"a": "ü"}, "graph": GRAPH}
    assert text == json.dumps(recipe, separators=(",", ":")).encode()
    assert png_with_recipe(b"GIF89a", node_id="z", node_type="t", params={}, graph=None) == (
        b"GIF89a"
    )
