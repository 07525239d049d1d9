"""Pack workers on a real two-node Ray cluster: same bytes as local, placement, faults (an
actor killed; a third node joined, then killed whole)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path
from typing import Any

import anyio
import pytest
from inline_core import NodeFailed, NullListener
from inline_host import CallTimedOut, Engine, PackCrashed
from inline_registry import sandbox_problem
from inline_sdk.protocol import TextValue

from ..e2e._graphs import n, request
from ._cluster import HEAD_IP, WORKER_IP, Cluster, one_more_node
from .conftest import ROOT, make_settings

# the session cluster starts inside the first test (minutes on a loaded 2-core machine)
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(1800)]
#: a node joined for the node-death test only
DOOMED_IP = "127.0.0.4"


class Progressed(NullListener):
    """Fires on the first progress event of a run."""

    def __init__(self) -> None:
        self.first = anyio.Event()

    def node_progress(self, node_id: str, event: Any) -> None:
        self.first.set()


def basics_doc() -> dict[str, Any]:
    doc = json.loads((ROOT / "examples" / "basics.json").read_text())
    doc["graph"]["nodes"][3]["params"]["asset"]["path"] = str(
        ROOT / "examples" / "assets" / "sunrise.png"
    )
    return doc


def echo(text: str) -> dict[str, Any]:
    return request(
        "e", n("t", "input/text", {"text": text}), n("e", "testpack/echo", {}, text=("t", "text"))
    )


def text_of(result: Any) -> str:
    value = result.outputs["text"].value
    assert isinstance(value, TextValue)
    return value.text


def where(engine: Engine, pack: str) -> dict[str, Any]:
    """What /v1/health shows of the pack's worker (``describe()``)."""
    return engine.supervisor.workers()[pack].describe()


async def test_basics_through_ray_gives_the_local_bytes(
    cluster: Cluster, ray_data_dir: Path, tmp_path: Path
) -> None:
    local = make_settings(ray_data_dir, tmp_path / "local", "")
    async with Engine.open(local) as engine:
        result = await engine.run(basics_doc())
        expected = engine.read_bytes(result.outputs["image"])
    remote = make_settings(ray_data_dir, tmp_path / "ray", cluster.address)
    async with Engine.open(remote) as engine:
        result = await engine.run(basics_doc())
        assert engine.read_bytes(result.outputs["image"]) == expected
        info = where(engine, "basics")
    assert info["launcher"] == "ray"
    assert info["ray"]["nodeAddress"] in (HEAD_IP, WORKER_IP)
    assert len(info["ray"]["nodeId"]) == 56
    # sandboxed on its node as a local worker is (where bubblewrap works: CI installs it)
    assert info["sandboxed"] is (sandbox_problem() is None or bool(os.environ.get("CI")))


async def eventually(check: Any, limit: float = 60.0) -> None:
    """Wait (bounded) for a condition only polling can see (Ray's state API, the reaper)."""
    with anyio.fail_after(limit):
        while not check():
            await anyio.sleep(0.2)


def ray_actors(prefix: str) -> list[Any]:
    """Actors whose name starts with ``prefix``, from Ray's state API."""
    from ray.util.state import list_actors

    return [a for a in list_actors(limit=1000) if (a.name or "").startswith(prefix)]


async def test_actors_are_visible_placed_by_resource_and_released_when_idle(
    cluster: Cluster, ray_data_dir: Path, tmp_path: Path
) -> None:
    settings = make_settings(
        ray_data_dir,
        tmp_path,
        cluster.address,
        INLINE_RAY_RESOURCES="testpack=custom:1",
        INLINE_RAY_PACKS_DIR=str(tmp_path / "node-packs"),
        INLINE_WORKER_IDLE="3",
    )
    async with Engine.open(settings) as engine:
        assert text_of(await engine.run(echo("placed"))) == "placed"
        info = where(engine, "testpack")
        # the only node with resource "custom" is the second one
        assert info["ray"]["nodeAddress"] == WORKER_IP
        assert info["ray"]["demand"]["resources"] == {"custom": 1.0}
        # its venv was built on the node from packs.lock (a packs dir of its own), not copied
        assert info["ray"]["venv"] == "built"
        assert (tmp_path / "node-packs" / "testpack").is_dir()
        (actor,) = [a for a in ray_actors("inline-testpack-") if a.state == "ALIVE"]
        assert actor.actor_id == info["ray"]["actorId"]
        assert actor.node_id == info["ray"]["nodeId"]
        # an idle worker stops (the supervisor's reaper) and its actor is released
        await eventually(lambda: "testpack" not in engine.supervisor.workers())

        def released() -> bool:
            states = {a.actor_id: a.state for a in ray_actors("inline-testpack-")}
            return states.get(info["ray"]["actorId"]) == "DEAD"

        await eventually(released)
    # the same packs dir on the node: the next actor reuses the venv built there
    async with Engine.open(settings) as engine:
        assert text_of(await engine.run(echo("again"))) == "again"
        assert where(engine, "testpack")["ray"]["venv"] == "reused"


async def test_killing_an_actor_fails_only_its_call_and_the_next_call_succeeds(
    cluster: Cluster, ray_data_dir: Path, tmp_path: Path
) -> None:
    settings = make_settings(ray_data_dir, tmp_path, cluster.address)
    async with Engine.open(settings) as engine:
        assert text_of(await engine.run(echo("warm"))) == "warm"
        bystander = engine.supervisor.workers()["basics"]
        listener = Progressed()
        failure: list[BaseException] = []

        async def run_wait() -> None:
            try:
                await engine.run(request("w", n("w", "testpack/wait", {"seconds": 120})), listener)
            except Exception as exc:
                failure.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run_wait)
            await listener.first.wait()
            before = where(engine, "testpack")["ray"]
            os.kill(before["actorPid"], signal.SIGKILL)  # the actor's process, on its node
        (exc,) = failure
        assert isinstance(exc, NodeFailed) and exc.node_id == "w"
        crash = exc.__cause__
        assert isinstance(crash, PackCrashed) and crash.pack == "testpack"
        message = str(crash)
        assert "testpack/wait" in message
        assert (
            f"ray: the actor on node {before['nodeId']} ({before['nodeAddress']}) died" in message
        )
        # only that worker's call failed: the other pack's worker is untouched
        assert engine.supervisor.workers()["basics"] is bystander and bystander.alive
        # the next call places a fresh actor
        assert text_of(await engine.run(echo("after"))) == "after"
        after = where(engine, "testpack")["ray"]
        assert after["actorId"] != before["actorId"]


async def test_timeouts_and_cancel_behave_as_locally(
    cluster: Cluster, ray_data_dir: Path, tmp_path: Path
) -> None:
    from dataclasses import replace

    settings = replace(
        make_settings(ray_data_dir, tmp_path, cluster.address), call_timeout=5.0, cancel_grace=1.0
    )
    async with Engine.open(settings) as engine:
        assert text_of(await engine.run(echo("up"))) == "up"
        with pytest.raises(NodeFailed) as err:
            await engine.run(request("h", n("h", "testpack/hang")))
        assert isinstance(err.value.__cause__, CallTimedOut)
        assert text_of(await engine.run(echo("next"))) == "next"
        # a cancel reaches the node on its node, which acknowledges it: the worker stays
        listener = Progressed()
        scope = anyio.CancelScope()
        worker = None
        async with anyio.create_task_group() as tg:

            async def run_wait() -> None:
                with scope:
                    await engine.run(
                        request("w", n("w", "testpack/wait", {"seconds": 60})), listener
                    )

            tg.start_soon(run_wait)
            await listener.first.wait()
            worker = engine.supervisor.workers()["testpack"]
            scope.cancel()
        assert scope.cancelled_caught
        assert worker is not None and worker.alive and not worker.running


async def test_two_runs_on_two_packs_run_on_two_nodes_at_once(
    cluster: Cluster, ray_data_dir: Path, tmp_path: Path
) -> None:
    settings = make_settings(
        ray_data_dir,
        tmp_path,
        cluster.address,
        INLINE_RAY_RESOURCES=f"testpack=custom:1,basics=node:{HEAD_IP}:0.01",
    )
    async with Engine.open(settings) as engine:
        listener = Progressed()
        seen: dict[str, Any] = {}

        async def long_run() -> None:
            # waits until the other run has finished (then it is cancelled): they overlap
            with anyio.CancelScope() as scope:
                seen["scope"] = scope
                await engine.run(request("w", n("w", "testpack/wait", {"seconds": 120})), listener)

        async with anyio.create_task_group() as tg:
            tg.start_soon(long_run)
            await listener.first.wait()
            result = await engine.run(basics_doc())
            seen["running"] = bool(engine.supervisor.workers()["testpack"].running)
            seen["png"] = engine.read_bytes(result.outputs["image"])[:8]
            seen["scope"].cancel()
        assert seen["running"], "the first run was still running when the second finished"
        assert seen["png"] == b"\x89PNG\r\n\x1a\n"
        nodes = {where(engine, p)["ray"]["nodeAddress"] for p in ("testpack", "basics")}
    assert nodes == {WORKER_IP, HEAD_IP}


async def test_a_node_that_dies_fails_only_the_calls_it_was_running(
    cluster: Cluster, ray_data_dir: Path, tmp_path: Path
) -> None:
    """Every process of one node killed at once (a machine gone): its call fails naming the
    node and what Ray said; a worker on another node goes on."""
    import psutil

    with one_more_node(cluster, DOOMED_IP, {"doomed": 1}) as doomed:
        settings = make_settings(
            ray_data_dir,
            tmp_path,
            cluster.address,
            INLINE_RAY_RESOURCES=f"testpack=doomed:1,basics=node:{HEAD_IP}:0.01",
        )
        async with Engine.open(settings) as engine:
            assert text_of(await engine.run(echo("warm"))) == "warm"
            assert where(engine, "testpack")["ray"]["nodeAddress"] == DOOMED_IP
            await engine.run(basics_doc())
            bystander = engine.supervisor.workers()["basics"]
            listener = Progressed()
            failure: list[BaseException] = []

            async def run_wait() -> None:
                try:
                    wait = request("w", n("w", "testpack/wait", {"seconds": 300}))
                    await engine.run(wait, listener)
                except Exception as exc:
                    failure.append(exc)

            before = where(engine, "testpack")["ray"]
            with anyio.fail_after(240):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(run_wait)
                    await listener.first.wait()
                    node = psutil.Process(doomed.procs[0].pid).children(recursive=True)
                    assert any(p.name() == "raylet" for p in node)
                    for proc in node:  # the node's raylet, agents and workers, all at once
                        with contextlib.suppress(psutil.NoSuchProcess):
                            proc.kill()
            (exc,) = failure
            assert isinstance(exc, NodeFailed) and exc.node_id == "w"
            crash = exc.__cause__
            assert isinstance(crash, PackCrashed) and crash.pack == "testpack"
            said = str(crash).partition(
                f"ray: the actor on node {before['nodeId']} ({DOOMED_IP}) died: "
            )
            assert said[1] and said[2].strip(), str(crash)  # the node, and what Ray said
            # the worker on the head goes on
            assert engine.supervisor.workers()["basics"] is bystander and bystander.alive
            result = await engine.run(basics_doc())
            assert engine.read_bytes(result.outputs["image"])[:8] == b"\x89PNG\r\n\x1a\n"
