"""The engine end to end, through real workers in their own uv venvs."""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest
from inline_core import GraphInvalid, NodeFailed, NullListener, PlannedNode
from inline_host import CallTimedOut, Engine, NodeError, PackCrashed
from inline_sdk.protocol import Progress, TextValue

from ._graphs import n, png_size, request

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]


class Recorder(NullListener):
    """Collects what a run reports; ``first_progress`` fires on the first progress event."""

    def __init__(self) -> None:
        self.finished: list[tuple[str, bool]] = []
        self.progress: list[Any] = []
        self.first_progress = anyio.Event()

    def node_progress(self, node_id: str, event: Any) -> None:
        self.progress.append((node_id, event))
        self.first_progress.set()

    def node_finished(self, node: PlannedNode, outputs: dict[str, Any], cached: bool) -> None:
        self.finished.append((node.id, cached))


def text_of(result: Any, port: str = "text") -> str:
    value = result.outputs[port].value
    assert isinstance(value, TextValue)
    return value.text


async def test_basics_example_renders_the_resized_image(settings):
    doc = json.loads((ROOT / "examples" / "basics.json").read_text())
    doc["graph"]["nodes"][3]["params"]["asset"]["path"] = str(
        ROOT / "examples" / "assets" / "sunrise.png"
    )
    settings = replace(settings, input_roots=(ROOT / "examples",))
    async with Engine.open(settings) as engine:
        result = await engine.run(doc)
        png = engine.read_bytes(result.outputs["image"])
    assert png_size(png) == (256, 160)
    # only the target's closure ran: the text nodes were not planned
    assert [p.id for p in result.plan.nodes] == ["photo", "thumb"]


async def test_text_join_and_cache_rerun_only_what_changed(settings):
    def doc(sep: str, b: str = "b") -> dict[str, Any]:
        return request(
            "out",
            n("a", "input/text", {"text": "a"}),
            n("b", "input/text", {"text": b}),
            n("j", "text/join", {"separator": sep}, a=("a", "text"), b=("b", "text")),
            n("out", "testpack/echo", {"suffix": "!"}, text=("j", "text")),
        )

    async with Engine.open(settings) as engine:
        first = Recorder()
        assert text_of(await engine.run(doc("-"), first)) == "a-b!"
        assert all(not cached for _, cached in first.finished)
        again = Recorder()
        assert text_of(await engine.run(doc("-"), again)) == "a-b!"
        assert all(cached for _, cached in again.finished)
        changed = Recorder()
        assert text_of(await engine.run(doc("+"), changed)) == "a+b!"
        assert dict(changed.finished) == {"a": True, "b": True, "j": False, "out": False}


async def test_print_in_node_code_does_not_break_the_protocol(settings):
    async with Engine.open(settings) as engine:
        result = await engine.run(request("x", n("x", "testpack/noisy", {"lines": 2000})))
        assert text_of(result) == "still fine"
        result = await engine.run(
            request(
                "e",
                n("t", "input/text", {"text": "ok"}),
                n("e", "testpack/echo", {}, text=("t", "text")),
            )
        )
        assert text_of(result) == "ok"
    log = (settings.logs_dir / "testpack.log").read_text(errors="replace")
    assert "noise 1999" in log and "raw bytes on fd 1" in log


async def test_sigkill_mid_call_fails_that_call_with_the_reason_and_next_run_succeeds(settings):
    async with Engine.open(settings) as engine:
        listener = Recorder()
        failure: list[BaseException] = []

        async def run_wait() -> None:
            try:
                await engine.run(request("w", n("w", "testpack/wait", {"seconds": 60})), listener)
            except Exception as exc:
                failure.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run_wait)
            await listener.first_progress.wait()
            pid = engine.supervisor.workers()["testpack"].pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
        (exc,) = failure
        assert isinstance(exc, NodeFailed) and exc.node_id == "w"
        crash = exc.__cause__
        assert isinstance(crash, PackCrashed)
        assert crash.pack == "testpack" and crash.signal == signal.SIGKILL
        assert "killed by signal 9 (SIGKILL)" in str(crash) and "testpack/wait" in str(crash)
        result = await engine.run(
            request(
                "e",
                n("t", "input/text", {"text": "again"}),
                n("e", "testpack/echo", {}, text=("t", "text")),
            )
        )
        assert text_of(result) == "again"
        assert engine.supervisor.workers()["testpack"].pid != pid


async def test_segfault_costs_only_its_call(settings):
    async with Engine.open(settings) as engine:
        with pytest.raises(NodeFailed) as err:
            await engine.run(request("s", n("s", "testpack/segfault")))
        crash = err.value.__cause__
        assert isinstance(crash, PackCrashed) and crash.signal == signal.SIGSEGV
        assert "SIGSEGV" in str(crash)
        result = await engine.run(
            request(
                "e",
                n("t", "input/text", {"text": "alive"}),
                n("e", "testpack/echo", {}, text=("t", "text")),
            )
        )
        assert text_of(result) == "alive"


async def test_a_raising_node_returns_its_traceback(settings):
    async with Engine.open(settings) as engine:
        with pytest.raises(NodeFailed) as err:
            await engine.run(request("f", n("f", "testpack/fail", {"message": "kaput 42"})))
    cause = err.value.__cause__
    assert isinstance(cause, NodeError)
    assert cause.remote_type == "ValueError" and cause.remote_message == "kaput 42"
    assert "in deep" in cause.traceback and "ValueError: kaput 42" in cause.traceback
    assert err.value.node_id == "f"


async def test_cancel_stops_a_long_node_at_its_next_check(settings):
    settings = replace(settings, cancel_grace=60.0)
    async with Engine.open(settings) as engine:
        listener = Recorder()
        async with anyio.create_task_group() as tg:
            scope = anyio.CancelScope()

            async def run_wait() -> None:
                with scope:
                    await engine.run(
                        request("w", n("w", "testpack/wait", {"seconds": 600})), listener
                    )

            tg.start_soon(run_wait)
            await listener.first_progress.wait()
            worker = engine.supervisor.workers()["testpack"]
            started = time.monotonic()
            scope.cancel()
        # the worker acknowledged the cancel (else we would have waited out the 60 s grace)
        assert time.monotonic() - started < 10
        assert scope.cancelled_caught
        assert worker.alive and not worker.running
        assert engine.supervisor.workers()["testpack"] is worker


async def test_a_hanging_node_times_out_and_the_host_carries_on(settings):
    settings = replace(settings, call_timeout=1.0, cancel_grace=0.5)
    async with Engine.open(settings) as engine:
        with pytest.raises(NodeFailed) as err:
            await engine.run(request("h", n("h", "testpack/hang")))
        assert isinstance(err.value.__cause__, CallTimedOut)
        assert "did not finish within 1s" in str(err.value.__cause__)
        result = await engine.run(
            request(
                "e",
                n("t", "input/text", {"text": "next"}),
                n("e", "testpack/echo", {}, text=("t", "text")),
            )
        )
        assert text_of(result) == "next"


async def test_several_calls_in_flight_in_one_worker(settings):
    async with Engine.open(settings) as engine:
        results: list[str] = []

        async def meet(tag: str) -> None:
            out = await engine.supervisor.call(
                "testpack", "testpack/meet", tag, {"group": "direct", "parties": 3, "tag": tag}, {}
            )
            value = out["text"].value
            assert isinstance(value, TextValue)
            results.append(value.text)

        async with anyio.create_task_group() as tg:
            for tag in "xyz":
                tg.start_soon(meet, tag)
        assert sorted(r.split(" (")[1][0] for r in results) == ["x", "y", "z"]


async def test_independent_nodes_of_a_graph_run_concurrently(settings):
    doc = request(
        "j",
        n("m1", "testpack/meet", {"group": "graph", "parties": 2, "tag": "one"}),
        n("m2", "testpack/meet", {"group": "graph", "parties": 2, "tag": "two"}),
        n("j", "text/join", {"separator": " & "}, a=("m1", "text"), b=("m2", "text")),
    )
    async with Engine.open(settings) as engine:
        text = text_of(await engine.run(doc))
    assert text.startswith("met 2 (one") and "met 2 (two" in text


async def test_bulk_bytes_cross_workers_through_shared_memory(settings):
    doc = request(
        "m",
        n("b", "testpack/blob", {"mib": 12}),
        n("m", "otherpack/measure", {}, image=("b", "image")),
    )
    async with Engine.open(settings) as engine:
        result = await engine.run(doc)
        blob = engine.cache.get(result.plan.node("b").key)
        caps = {p: w.capabilities for p, w in engine.supervisor.workers().items()}
    assert text_of(result) == "12582912 bytes, first 7, last 9, pages 3072"
    assert blob is not None and type(blob["image"].value.data).__name__ == "ShmRef"
    if settings.launcher == "local":  # zero copy: the value names the producer's segment
        assert blob["image"].pack == "testpack" and "shared-memory" in caps["testpack"]
    else:
        # no shared memory with the workers: the 12 MiB came in 4 MiB chunks, the host holds
        # them (in its own segment, too large for a frame) and chunked them out again
        assert blob["image"].pack == "host"
        assert "shared-memory" not in caps["testpack"] and "chunks" in caps["otherpack"]


async def test_progress_events_arrive_for_a_node(settings):
    settings = replace(settings, input_roots=(ROOT / "examples",))
    async with Engine.open(settings) as engine:
        listener = Recorder()
        doc = json.loads((ROOT / "examples" / "basics.json").read_text())
        doc["graph"]["nodes"][3]["params"]["asset"]["path"] = str(
            ROOT / "examples" / "assets" / "sunrise.png"
        )
        await engine.run(doc, listener)
    phases = [e.phase for nid, e in listener.progress if nid == "thumb" and isinstance(e, Progress)]
    assert phases == ["preparing", "save"]


async def test_invalid_graph_reports_every_problem_before_anything_runs(settings):
    doc = request(
        "r",
        n("t", "input/text", {"text": 5}),
        n("x", "nope/unknown"),
        n("r", "image/resize", {"width": 0, "height": 9000}, image=("t", "text")),
    )
    async with Engine.open(settings) as engine:
        with pytest.raises(GraphInvalid) as err:
            engine.prepare(doc)
        assert not engine.supervisor.workers()
    paths = {i.path for i in err.value.issues}
    assert "$.graph.nodes[2].params.width" in paths and "$.graph.nodes[2].params.height" in paths
    assert "$.graph.nodes[0].params.text" in paths
    messages = " | ".join(i.message for i in err.value.issues)
    assert "Unknown node type 'nope/unknown'." in messages
    assert "Cannot wire text into image at r.image." in messages


async def test_host_never_imports_torch(settings, heavy_imports):
    async with Engine.open(settings) as engine:
        await engine.run(
            request(
                "e",
                n("t", "input/text", {"text": "x"}),
                n("e", "testpack/echo", {}, text=("t", "text")),
            )
        )
    assert heavy_imports.attempts == []
    assert not {"torch", "diffusers", "transformers"} & set(__import__("sys").modules)


async def test_handles_pass_by_reference_and_are_released_on_eviction(settings):
    settings = replace(settings, cache_entries=2)
    async with Engine.open(settings) as engine:
        made = request(
            "u",
            n("m", "testpack/make-model", {"label": "one"}),
            n("u", "testpack/use-model", {}, model=("m", "model")),
        )
        result = await engine.run(made)
        made_out = engine.cache.get(result.plan.node("m").key)
        assert made_out is not None
        assert text_of(result) == made_out["ident"].value.text  # the very same object

        async def live(nonce: int) -> int:
            out = await engine.run(request("l", n("l", "testpack/live-models", {"nonce": nonce})))
            return int(text_of(out))

        assert await live(1) == 1
        # two more entries evict the model's; the host tells the worker to release it
        await live(2)
        await live(3)
        assert result.plan.node("m").key not in engine.cache
        assert await live(4) == 0


async def test_previews_reach_the_listener(settings):
    async with Engine.open(settings) as engine:
        listener = Recorder()
        await engine.run(request("p", n("p", "testpack/preview")), listener)
    previews = [e for _, e in listener.progress if type(e).__name__ == "Preview"]
    assert len(previews) == 1 and previews[0].image.data.data.endswith(b"preview")


async def test_a_pack_that_cannot_serve_is_a_clear_error(settings, tmp_path):
    broken = tmp_path / "brokenpack"
    (broken / "src" / "inline_brokenpack").mkdir(parents=True)
    (broken / "pyproject.toml").write_text(
        (ROOT / "tests" / "packs" / "otherpack" / "pyproject.toml")
        .read_text()
        .replace("otherpack", "brokenpack")
    )
    (broken / "src" / "inline_brokenpack" / "__init__.py").write_text(
        "import definitely_not_installed_module\n"
    )
    from inline_registry import HandshakeFailed, ensure_env, probe

    env = ensure_env(
        __import__("inline_registry").read_pack_source(broken, first_party=False),
        settings.packs_dir,
    )
    with pytest.raises(HandshakeFailed) as err:
        probe(env, timeout=60)
    assert "brokenpack" in str(err.value)
    assert "No module named 'definitely_not_installed_module'" in str(err.value)
