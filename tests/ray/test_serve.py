"""Deployments on Ray Serve: replicas on two nodes serving at once, handles and models routed
back to their replica, a replica killed mid-call costing only that call (and replaced), an
undeploy freeing the replicas, and a deployment that outlives its host."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import anyio
import pytest
from inline_host import Engine, NodeError, PackCrashed
from inline_host.runs import DeploymentService, DeploymentView, RunStore
from inline_registry import sandbox_problem
from inline_sdk.protocol import TextValue

from ._cluster import HEAD_IP, WORKER_IP, Cluster
from .conftest import make_settings

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(1800)]
#: Workers are sandboxed where bubblewrap works (CI installs it: there it must be so).
SANDBOXED = sandbox_problem() is None or bool(os.environ.get("CI"))


class Gate:
    """A ``testpack/gate`` call through the supervisor, held open until its file exists."""

    def __init__(
        self, engine: Engine, folder: Path, tag: str, ended: anyio.Event | None = None
    ) -> None:
        self.engine = engine
        self.file = folder / f"open-{tag}"
        self.tag = tag
        self.started = anyio.Event()
        self.done = anyio.Event()
        #: Set when this call (or another sharing it) ends.
        self.ended = ended or anyio.Event()
        self.outcome: Any = None

    def on_event(self, event: Any) -> None:
        # the node's own report, not the host's first-use "preparing" one
        if getattr(event, "status", None) == "held":
            self.started.set()

    async def run(self) -> None:
        params = {"file": str(self.file), "tag": self.tag}
        try:
            self.outcome = await self.engine.supervisor.call(
                "testpack", "testpack/gate", self.tag, params, {}, self.on_event
            )
        except Exception as exc:  # kept for the test to look at
            self.outcome = exc
        finally:
            self.done.set()
            self.ended.set()

    def open(self) -> None:
        self.file.write_text("open")


async def ready(
    service: DeploymentService, name: str, replicas: int, gone: int | None = None
) -> DeploymentView:
    """The view once Serve runs ``replicas`` live replicas of ``name`` (Ray's state API),
    none of them the replica ``gone``."""

    def live(view: DeploymentView) -> list[int | None]:
        return [r.pid for r in view.replicas if r.state == "ready"]

    with anyio.fail_after(600):
        view = await service.until_ready(name, 600)
        assert view is not None and view.state == "ready", view
        while len(live(view)) != replicas or gone in live(view):
            await anyio.sleep(0.2)  # the keeper looks at Ray's state once a second
            view = service.view(name)
            assert view is not None
    return view


async def test_serve_replicas_on_two_nodes_serve_at_once_and_a_kill_costs_one_call(
    cluster: Cluster, ray_data_dir: Path, tmp_path: Path
) -> None:
    settings = make_settings(ray_data_dir, tmp_path, cluster.address)
    store = RunStore(tmp_path / "inline.db")
    async with Engine.open(settings) as engine, anyio.create_task_group() as tg:
        service = DeploymentService(engine, store)
        await service.start(tg)
        created = await service.create({"node": "testpack/gate", "replicas": 2, "max_per_node": 1})
        assert created.name == "testpack-gate"
        view = await ready(service, "testpack-gate", 2)
        # Serve spreads the replicas: one on each node, each listed with its node
        assert {r.where for r in view.replicas} == {HEAD_IP, WORKER_IP}

        # two calls at once: both run (gate's concurrency is 1, so on separate replicas)
        first, second = Gate(engine, tmp_path, "a"), Gate(engine, tmp_path, "b")
        tg.start_soon(first.run)
        tg.start_soon(second.run)
        with anyio.fail_after(120):
            await first.started.wait()
            await second.started.wait()
        first.open()
        second.open()
        with anyio.fail_after(120):
            await first.done.wait()
            await second.done.wait()
        assert "image" in first.outcome and "image" in second.outcome
        # the image bytes came back through Ray: the host holds them
        assert engine.read_bytes(first.outcome["image"]).startswith(b"\x89PNG")
        # each replica's worker runs sandboxed on its node (bubblewrap: scripts/test installs
        # it), and the deployment's view says so
        served = service.view("testpack-gate")
        assert served is not None
        assert [r.sandboxed for r in served.replicas] == [SANDBOXED] * 2, served.replicas

        # a handle goes back to the replica that made it
        made = await engine.supervisor.call(
            "testpack", "testpack/make-model", "m", {"label": "fox"}, {}
        )
        used = await engine.supervisor.call(
            "testpack", "testpack/use-model", "u", {}, {"model": [made["model"]]}
        )
        # the same object: the call ran where the handle was made
        assert used["text"].value == TextValue(text=made["ident"].value.text)

        # a replica killed mid-call fails only that call; the other finishes; Serve replaces it
        one_ended = anyio.Event()
        calls = [Gate(engine, tmp_path, tag, one_ended) for tag in ("c", "d")]
        for call in calls:
            tg.start_soon(call.run)
        with anyio.fail_after(120):
            for call in calls:
                await call.started.wait()  # one on each replica (each takes one at a time)
        victim = next(r.pid for r in view.replicas if r.pid is not None)
        os.kill(victim, signal.SIGKILL)
        with anyio.fail_after(120):
            await one_ended.wait()
        (doomed,) = [c for c in calls if c.outcome is not None]
        assert isinstance(doomed.outcome, PackCrashed), doomed.outcome
        (spared,) = [c for c in calls if c is not doomed]
        spared.open()
        with anyio.fail_after(120):
            await spared.done.wait()
        assert "image" in spared.outcome
        await ready(service, "testpack-gate", 2, gone=victim)  # Serve replaced it

        # a node's own failure comes back as that node's error
        with pytest.raises(NodeError, match="no fox"):
            await engine.supervisor.call(
                "testpack", "testpack/fail", "f", {"message": "no fox"}, {}
            )
        tg.cancel_scope.cancel()  # the host stops; Serve keeps the deployment running

    # a restarted host over the same store brings the deployment back, and it serves
    async with Engine.open(settings) as engine, anyio.create_task_group() as tg:
        service = DeploymentService(engine, store)
        assert await service.start(tg) == 1
        await ready(service, "testpack-gate", 2)
        again = Gate(engine, tmp_path, "e")
        again.open()
        await again.run()
        assert "image" in again.outcome, again.outcome

        # undeploy: the Serve application goes, and with it the replicas
        assert await service.delete("testpack-gate")
        from ray import serve

        assert "inline-testpack-gate" not in serve.status().applications
        tg.cancel_scope.cancel()


async def test_serve_autoscales_from_min_to_max_under_a_queue_and_back(
    cluster: Cluster, ray_data_dir: Path, tmp_path: Path
) -> None:
    settings = make_settings(ray_data_dir, tmp_path, cluster.address)
    store = RunStore(tmp_path / "inline.db")
    body = {"node": "testpack/gate", "name": "gates", "min": 1, "max": 2, "target_ongoing": 1,
            "upscale_delay_s": 0, "downscale_delay_s": 1, "max_per_node": 1}  # fmt: skip
    async with Engine.open(settings) as engine, anyio.create_task_group() as tg:
        service = DeploymentService(engine, store)
        await service.start(tg)
        created = await service.create(body)
        assert created.autoscaling is not None and created.min == 1 and created.max == 2
        await ready(service, "gates", 1)
        # two calls held open: one runs, one waits for a replica; Serve adds the second
        calls = [Gate(engine, tmp_path, f"q{i}") for i in range(2)]
        for call in calls:
            tg.start_soon(call.run)
        view = await ready(service, "gates", 2)
        assert [(d.replicas_from, d.replicas_to) for d in view.decisions] == [(1, 2)]
        with anyio.fail_after(120):
            for call in calls:
                await call.started.wait()  # both run now, one on each replica
        for call in calls:
            call.open()
        with anyio.fail_after(120):
            for call in calls:
                await call.done.wait()
        assert all("image" in c.outcome for c in calls)
        # idle past the downscale delay: back to min
        view = await ready(service, "gates", 1)
        assert (view.decisions[-1].replicas_from, view.decisions[-1].replicas_to) == (2, 1)
        assert await service.delete("gates")
        tg.cancel_scope.cancel()


async def test_a_deployments_model_missing_on_its_node_is_fetched_from_the_host(
    cluster: Cluster, ray_data_dir: Path, tmp_path: Path
) -> None:
    """With ``INLINE_RAY_MODELS_DIR``, the replica's node reads models from its own folder:
    the deployed model it lacks (or holds with other bytes) is fetched from the host's models
    dir before the replica starts, its hash kept beside it, and its calls read those bytes; a
    second deployment on a node that has it fetches nothing."""
    node_models = tmp_path / "node-models"
    settings = make_settings(
        ray_data_dir, tmp_path, cluster.address, INLINE_RAY_MODELS_DIR=str(node_models)
    )
    content = "".join(f"weight {i}\n" for i in range(20_000)).encode()
    (tmp_path / "models" / "vae").mkdir(parents=True)
    (tmp_path / "models" / "vae" / "tiny.safetensors").write_bytes(content)
    (node_models / "vae").mkdir(parents=True)
    stale = node_models / "vae" / "tiny.safetensors"
    stale.write_bytes(b"x" * len(content))  # an older copy of the same size: other bytes
    store = RunStore(tmp_path / "inline.db")
    body = {"node": "testpack/read-model", "model": "tiny.safetensors", "replicas": 1}
    async with Engine.open(settings) as engine, anyio.create_task_group() as tg:
        service = DeploymentService(engine, store)
        await service.start(tg)
        made = await service.create(body)
        await ready(service, made.name, 1)
        assert stale.read_bytes() == content
        assert sorted(p.name for p in (node_models / "vae").iterdir()) == [
            ".tiny.safetensors.lock",
            ".tiny.safetensors.sha256",
            "tiny.safetensors",
        ]
        out = await engine.supervisor.call(
            "testpack", "testpack/read-model", "r", {"file": "tiny.safetensors"}, {}
        )
        value = out["text"].value
        assert isinstance(value, TextValue) and value.text == content.decode()
        assert await service.delete(made.name)
        fetched_at = stale.stat().st_mtime_ns
        made = await service.create(body)  # the node has it now: kept as it is
        await ready(service, made.name, 1)
        assert stale.stat().st_mtime_ns == fetched_at and stale.read_bytes() == content
        assert await service.delete(made.name)
        tg.cancel_scope.cancel()
    store.close()
