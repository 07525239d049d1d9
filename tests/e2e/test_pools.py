"""A pack as a pool of replicas: calls at once on separate workers, handles back to the replica
that made them, a killed replica costing only its own call, a smaller pool retiring the rest."""

from __future__ import annotations

import os
import signal
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest
from inline_host import Engine, NodeError, PackCrashed
from inline_host.workers import WorkerProcess
from inline_sdk.protocol import TextValue

pytestmark = pytest.mark.anyio


class Held:
    """A ``testpack/gate`` call held open in the supervisor until its file exists."""

    def __init__(self, engine: Engine, folder: Path, tag: str) -> None:
        self.engine = engine
        self.file = folder / f"open-{tag}"
        self.tag = tag
        self.started = anyio.Event()
        self.done = anyio.Event()
        self.outcome: dict[str, Any] | BaseException | None = None

    async def run(self) -> None:
        def on_event(event: Any) -> None:
            # the node's own report, not the host's first-use "preparing" one
            if getattr(event, "status", None) == "held":
                self.started.set()

        params = {"file": str(self.file), "tag": self.tag}
        try:
            self.outcome = await self.engine.supervisor.call(
                "testpack", "testpack/gate", self.tag, params, {}, on_event
            )
        except BaseException as exc:  # kept for the test to look at
            self.outcome = exc
            if not isinstance(exc, Exception):
                raise
        finally:
            self.done.set()

    def release(self) -> None:
        self.file.write_text("open")


def busy_replica(engine: Engine) -> WorkerProcess:
    (replica,) = [w for w in engine.supervisor.pool("testpack") if w.pending]
    return replica


async def test_two_replicas_serve_two_calls_at_once_and_handles_go_home(settings, tmp_path):
    async with Engine.open(settings) as engine:
        engine.supervisor.set_replicas("testpack", 2)
        first = Held(engine, tmp_path, "a")
        async with anyio.create_task_group() as tg:
            tg.start_soon(first.run)
            with anyio.fail_after(120):
                await first.started.wait()
            held = busy_replica(engine)
            # the only replica is busy and the pool has room: the next call starts another
            made = await engine.supervisor.call(
                "testpack", "testpack/make-model", "m", {"label": "x"}, {}
            )
            pool = engine.supervisor.pool("testpack")
            assert len(pool) == 2 and len({w.pid for w in pool}) == 2
            maker = made["model"].generation
            assert maker != held.generation
            second = Held(engine, tmp_path, "b")
            tg.start_soon(second.run)
            with anyio.fail_after(60):
                await second.started.wait()
            # both replicas hold a call now: one each
            assert sorted(len(w.pending) for w in engine.supervisor.pool("testpack")) == [1, 1]
            first.release()
            second.release()
        assert isinstance(first.outcome, dict) and isinstance(second.outcome, dict)
        # both idle: the handle still goes to the replica that made it (any other would refuse)
        used = await engine.supervisor.call(
            "testpack", "testpack/use-model", "u", {}, {"model": [made["model"]]}
        )
        value = used["text"].value
        assert isinstance(value, TextValue) and value.text == made["ident"].value.text
        assert len(engine.supervisor.pool("testpack")) == 2  # no third was started


async def test_a_killed_replica_fails_only_its_call_and_is_replaced(settings, tmp_path):
    async with Engine.open(settings) as engine:
        engine.supervisor.set_replicas("testpack", 2)
        doomed, survivor = Held(engine, tmp_path, "doomed"), Held(engine, tmp_path, "lives")
        async with anyio.create_task_group() as tg:
            tg.start_soon(doomed.run)
            with anyio.fail_after(120):
                await doomed.started.wait()
            victim = busy_replica(engine)
            tg.start_soon(survivor.run)
            with anyio.fail_after(120):
                await survivor.started.wait()
            assert victim.pid is not None
            os.kill(victim.pid, signal.SIGKILL)
            with anyio.fail_after(60):
                await doomed.done.wait()
            survivor.release()
        assert isinstance(doomed.outcome, PackCrashed), doomed.outcome
        assert isinstance(survivor.outcome, dict)  # the other replica's call was untouched
        live = engine.supervisor.pool("testpack")
        assert [w.pid for w in live] != [victim.pid] and victim not in live
        # calls go on: a held call and a second one at once get two live replicas again
        again, other = Held(engine, tmp_path, "again"), Held(engine, tmp_path, "other")
        async with anyio.create_task_group() as tg:
            for held in (again, other):
                tg.start_soon(held.run)
                with anyio.fail_after(120):
                    await held.started.wait()
            pids = {w.pid for w in engine.supervisor.pool("testpack")}
            assert len(pids) == 2 and victim.pid not in pids
            again.release()
            other.release()
        assert isinstance(again.outcome, dict) and isinstance(other.outcome, dict)


async def test_a_smaller_pool_retires_the_extra_replicas_after_their_calls(settings, tmp_path):
    async with Engine.open(settings) as engine:
        engine.supervisor.set_replicas("testpack", 2)
        a, b = Held(engine, tmp_path, "a"), Held(engine, tmp_path, "b")
        async with anyio.create_task_group() as tg:
            for held in (a, b):
                tg.start_soon(held.run)
                with anyio.fail_after(120):
                    await held.started.wait()
            extra = engine.supervisor.pool("testpack")[1]
            engine.supervisor.set_replicas("testpack", 1)
            assert extra not in engine.supervisor.pool("testpack")  # no new call goes there
            assert extra.alive  # it finishes the call it holds
            a.release()
            b.release()
        assert isinstance(a.outcome, dict) and isinstance(b.outcome, dict)
        with anyio.fail_after(60):
            while extra.alive:  # bounded: the retired replica stops once its call ended
                await anyio.sleep(0.01)
        assert len(engine.supervisor.pool("testpack")) == 1
        with pytest.raises(ValueError, match="at least one replica"):
            engine.supervisor.set_replicas("testpack", 0)


async def test_the_idle_reaper_leaves_the_replicas_a_deployment_keeps(settings, tmp_path):
    settings = replace(settings, worker_idle=0.3)
    async with Engine.open(settings) as engine:
        sup = engine.supervisor
        sup.set_replicas("testpack", 2, keep=2)
        kept = [await sup.add_replica("testpack"), await sup.add_replica("testpack")]
        # a pack nobody keeps: its idle worker is stopped, so a reap pass has run
        await sup.call("basics", "input/text", "t", {"text": "idle soon"}, {})
        loose = sup.workers()["basics"]
        with anyio.fail_after(60):
            while loose.alive:  # bounded: the reaper stops it once idle 0.3 s
                await anyio.sleep(0.05)
        assert all(w.alive for w in kept) and sup.pool("testpack") == kept


async def test_a_warm_up_loads_in_that_replica_only_and_a_failing_one_is_its_nodes_error(
    settings,
):
    async with Engine.open(settings) as engine:
        sup = engine.supervisor
        sup.set_replicas("testpack", 2)
        first = await sup.add_replica("testpack")
        second = await sup.add_replica("testpack")

        async def said(replica: WorkerProcess) -> str:
            out = await replica.call("testpack/warmed", "w", {}, {}, None, 60)
            value = out["text"].value
            assert isinstance(value, TextValue)
            return value.text

        assert await first.warm("testpack/warmed", {"tag": "a"}, 60)
        assert (await said(first), await said(second)) == ("warmed a", "cold")
        with pytest.raises(NodeError, match="no model 'fail' here"):
            await second.warm("testpack/warmed", {"tag": "fail"}, 60)
        assert second.alive and await said(second) == "cold"
        assert await second.warm("testpack/echo", {}, 60)  # no hook: nothing to load
        assert not first.pending and not second.pending
