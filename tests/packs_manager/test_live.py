"""A running host: an upgrade under a call in flight, idle workers, cached descriptors, switches."""

from __future__ import annotations

from dataclasses import replace

import anyio
import psutil
import pytest
from inline_host import Engine, PackService
from inline_registry import PackManager, load_registry

from ._host import request, settings_for
from ._packs import write_pack

pytestmark = pytest.mark.anyio


async def test_an_upgrade_lets_the_call_in_flight_finish_on_the_old_version(
    manager: PackManager, data_dir, tmp_path
):
    body = GATE_NODE.replace("{node_id}", "acme/say")
    src = write_pack(tmp_path / "acme", "acme", "0.1.0", body=body)
    manager.install(str(src))
    gate = tmp_path / "gate-open"
    async with Engine.open(settings_for(data_dir, tmp_path)) as engine:
        service = PackService(engine)
        old = await engine.supervisor.worker("acme")
        results: dict[str, str] = {}

        async def held() -> None:  # held in the old worker until the gate opens
            done = await engine.run(request("acme/say", {"gate": str(gate)}))
            results["held"] = done.outputs["text"].value.text  # type: ignore[union-attr]

        async with anyio.create_task_group() as tg:
            tg.start_soon(held)
            with anyio.fail_after(60):
                while not old.pending:  # the held call reached the old worker
                    await anyio.sleep(0.01)
            write_pack(src, "acme", "0.2.0", body=body)
            upgraded = await service.upgrade("acme")
            assert upgraded.version == "0.2.0"
            fresh = await engine.run(request("acme/say"))  # no gate: answers at once
            assert fresh.outputs["text"].value.text == "acme 0.2.0"  # type: ignore[union-attr]
            assert old.alive and old.pending  # still holding the call in flight
            gate.write_text("open")
        assert results["held"] == "acme 0.1.0"
        with anyio.fail_after(30):
            while old.alive:
                await anyio.sleep(0.05)
        new = engine.supervisor.workers()["acme"]
        assert new.pid != old.pid and new.generation == old.generation + 1
        assert engine.registry.packs["acme"].version == "0.2.0"


async def test_idle_workers_stop_and_come_back_on_the_next_call(
    manager: PackManager, data_dir, tmp_path
):
    manager.install(str(write_pack(tmp_path / "acme", "acme")))
    settings = replace(settings_for(data_dir, tmp_path), worker_idle=0.3)
    async with Engine.open(settings) as engine:
        await engine.run(request("acme/say"))
        first = engine.supervisor.workers()["acme"]
        with anyio.fail_after(10):
            while first.alive:
                await anyio.sleep(0.05)
        assert "acme" not in engine.supervisor.workers()
        again = await engine.run(request("acme/say", {"wait": 0.01}))
        assert again.outputs["text"].value.text == "acme 0.1.0"  # type: ignore[union-attr]
        assert engine.supervisor.workers()["acme"].generation == first.generation + 1


async def test_the_registry_is_served_from_the_cache_without_any_worker(
    manager: PackManager, data_dir, tmp_path, monkeypatch
):
    for name in ("one", "two", "three"):
        manager.install(str(write_pack(tmp_path / name, name)))

    def no_spawn(*_a, **_k):
        raise AssertionError("a worker was spawned")

    monkeypatch.setattr("inline_registry._handshake.spawn_worker_sync", no_spawn)
    async with Engine.open(settings_for(data_dir, tmp_path)) as engine:
        assert {"one/say", "two/say", "three/say"} <= {d.type for d in engine.descriptors()}
        assert engine.supervisor.workers() == {}
    workers = [p for p in psutil.Process().children() if "inline_sdk.worker" in p.cmdline()]
    assert workers == []


async def test_node_switches_are_live(manager: PackManager, data_dir, tmp_path):
    manager.install(str(write_pack(tmp_path / "acme", "acme")))
    async with Engine.open(settings_for(data_dir, tmp_path)) as engine:
        service = PackService(engine)
        before = engine.registry_version()
        await service.set_node_enabled("acme/say", False)
        assert engine.descriptor("acme/say") is None
        assert engine.registry.disabled == ("acme/say",)
        assert engine.registry_version() != before
        await service.set_node_enabled("acme/say", True)
        assert engine.descriptor("acme/say") is not None
        rows = await service.list()
        assert [r.name for r in rows] == ["acme"]
    disabled = write_pack(
        tmp_path / "quiet",
        "quiet",
        tool_inline='[tool.inline.nodes."quiet/say"]\nenabled = false\n',
    )
    manager.install(str(disabled))
    registry = load_registry(data_dir / "packs")
    assert registry.lookup("quiet/say") is None and "quiet/say" in registry.disabled


GATE_NODE = """
import os
from typing import Annotated
from inline_sdk import Context, NodeSpec, Output, Param, hookimpl, node

@node("{node_id}", title="Hold", category="Test")
def hold(
    ctx: Context, *, gate: Annotated[str, Param("Gate")] = ""
) -> Annotated[str, Output("text", "Text")]:
    while gate and not os.path.exists(gate):  # no gate: answer at once
        if ctx.wait_cancelled(0.01):
            ctx.check_cancelled()
    return "{text}"

@hookimpl
def inline_nodes() -> list[NodeSpec]:
    return [hold]
"""


async def test_a_queued_run_is_planned_again_after_an_upgrade(
    manager: PackManager, data_dir, tmp_path
):
    from inline_host.runs import RunService, RunStore

    src = write_pack(tmp_path / "acme", "acme", "0.1.0")
    manager.install(str(src))
    manager.install(str(write_pack(tmp_path / "gate", "gate", body=GATE_NODE, node_id="gate/hold")))
    gate = tmp_path / "gate-open"
    async with Engine.open(settings_for(data_dir, tmp_path)) as engine:
        store = RunStore(tmp_path / "runs.db")
        service = RunService(engine, store, max_concurrent=1)
        async with anyio.create_task_group() as tg:
            await service.start(tg)
            blocker, _, _ = await service.submit(request("gate/hold", {"gate": str(gate)}))
            sub, _ = service.subscribe(blocker)  # type: ignore[misc]
            while not any(e.type == "run_started" for e in await sub.next_batch()):
                pass
            queued, status, _ = await service.submit(request("acme/say"))
            assert status == "queued"
            key_at_submit = service.runs[queued].target_key
            write_pack(src, "acme", "0.2.0")
            await PackService(engine).upgrade("acme")
            gate.write_text("open")
            with anyio.fail_after(120):
                await service.runs[queued].settled.wait()
            run = service.runs[queued]
            assert run.status == "done"
            assert run.target_key != key_at_submit  # planned again: the new version's key
            assert run.target_key == engine.prepare(request("acme/say")).node("n").key
            (take,) = run.takes
            assert store.take_text(take.hash) == b"acme 0.2.0"  # text: in the run store
            tg.cancel_scope.cancel()
        store.close()
