"""Model affinity in a pool: two Z-Image models alternated over two replicas each stay on the
replica that loaded them (the memory broker's ledger says which holds what)."""

from __future__ import annotations

import shutil
from typing import Any

import pytest
from inline_host import Engine

from ..e2e._graphs import n, request
from .conftest import Tiny, install_comfy_layout

pytestmark = pytest.mark.anyio
A = "tiny_z_image_turbo.safetensors"
B = "tiny_b.safetensors"


def render(model: str, seed: int) -> dict[str, Any]:
    params = {"width": 256, "height": 256, "steps": 1, "seed": seed, "model": model}
    return request(
        "z",
        n("p", "input/text", {"text": "a fox"}),
        n("z", "alibaba/z-image-turbo", params, prompt=("p", "text")),
    )


async def test_two_models_stay_on_the_replicas_that_loaded_them(tiny: Tiny, settings):
    models = install_comfy_layout(tiny, settings.models_dir)
    shutil.copy(models / "diffusion_models" / A, models / "diffusion_models" / B)
    async with Engine.open(settings) as engine:
        sup = engine.supervisor
        sup.set_replicas("zimage", 2)
        first = await sup.add_replica("zimage")
        second = await sup.add_replica("zimage")
        assert first is not second

        def diffusion(replica: Any) -> list[str]:
            held = sup.broker.held(replica.shm_prefix)
            return sorted(p.rsplit("/", 1)[-1] for p in held if "diffusion_models" in p)

        expected = None
        for seed, model in enumerate([A, B, A, B, B, A]):
            await engine.run(render(model, seed))
            now = (diffusion(first), diffusion(second))
            if expected is None and now[0] and now[1]:
                expected = now  # each replica has loaded one of the two
            if expected is not None:
                assert now == expected, f"a replica loaded another model at render {seed}"
        assert expected is not None and sorted(expected) == sorted([[A], [B]])
        assert len(sup.pool("zimage")) == 2


async def test_a_gpu_pack_gets_no_more_replicas_than_gpus(settings, tmp_path):
    from inline_core import Gpu, Inventory
    from inline_host.runs import DeploymentError, DeploymentService, RunStore

    async with Engine.open(settings) as engine:
        store = RunStore(tmp_path / "deployments.db")
        service = DeploymentService(engine, store)
        broker = engine.supervisor.broker
        real = broker.inventory
        try:
            # the hardware of a one-GPU machine (this one has none): what the plan is checked on
            gpu = Gpu(index=0, name="one", total_bytes=24 << 30, free_bytes=24 << 30)
            broker.inventory = Inventory(real.ram_total_bytes, real.ram_free_bytes, (gpu,))
            with pytest.raises(DeploymentError, match=r"needs a GPU of its own .* has 1"):
                service.plan({"node": "alibaba/z-image-turbo", "replicas": 2})
            with pytest.raises(DeploymentError, match="at most 1"):
                service.plan({"node": "alibaba/z-image-turbo", "min": 0, "max": 3})
            assert service.plan({"node": "alibaba/z-image-turbo", "replicas": "auto"}).max == 1
            assert service.plan({"node": "input/text", "replicas": 3}).max == 3  # no model files
            broker.inventory = real
            assert service.plan({"node": "alibaba/z-image-turbo", "replicas": 2}).max == 2  # CPU
        finally:
            broker.inventory = real
            store.close()


async def test_a_deployment_is_ready_once_each_replica_holds_its_model(
    tiny: Tiny, settings, tmp_path
):
    """``--wait``'s promise: every replica has loaded the deployment's model before it counts
    as ready, so the first render loads nothing; a model that cannot load leaves the replica
    cold and the deployment failing, said in one line."""
    import anyio
    from inline_host.runs import DeploymentService, RunStore

    models = install_comfy_layout(tiny, settings.models_dir)
    shutil.copy(models / "diffusion_models" / A, models / "diffusion_models" / B)
    (models / "diffusion_models" / "broken.safetensors").write_bytes(b"\x10\x00" + b"\x00" * 30)
    store = RunStore(tmp_path / "deployments.db")
    async with Engine.open(settings) as engine, anyio.create_task_group() as tg:
        sup = engine.supervisor
        service = DeploymentService(engine, store)
        await service.start(tg)

        def diffusion(replica: Any) -> list[str]:
            held = sup.broker.held(replica.shm_prefix)
            return sorted(p.rsplit("/", 1)[-1] for p in held if "diffusion_models" in p)

        made = await service.create({"node": "alibaba/z-image-turbo", "model": B, "replicas": 2})
        view = await service.until_ready(made.name, 240)
        assert view is not None and view.state == "ready", view
        assert [r.state for r in view.replicas] == ["ready", "ready"]
        assert [diffusion(w) for w in sup.pool("zimage")] == [[B], [B]]
        await engine.run(render(B, 3))
        assert [diffusion(w) for w in sup.pool("zimage")] == [[B], [B]]
        assert await service.delete(made.name)

        made = await service.create(
            {"node": "alibaba/z-image-turbo", "model": "broken.safetensors", "replicas": 1}
        )
        view = await service.until_ready(made.name, 240)
        assert view is not None
        assert view.state.startswith("failing: replica ") and "broken.safetensors" in view.state
        assert "\n" not in view.state
        (replica,) = view.replicas
        assert replica.state.startswith("cold: ")
        assert await service.delete(made.name)
        tg.cancel_scope.cancel()
    store.close()


async def test_each_replica_of_a_gpu_pack_sees_a_gpu_of_its_own(settings):
    """On a machine of two GPUs (this one has none: the broker is given their inventory), two
    replicas of Z-Image are pinned one to each: the worker sees only its GPU, the broker plans
    that GPU alone for it, and a replica that leaves frees its GPU for the next."""
    from pathlib import Path

    from inline_core import Gpu, Inventory

    def environ(pid: int | None) -> dict[str, str]:
        raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        return dict(e.decode().split("=", 1) for e in raw if b"=" in e)

    async with Engine.open(settings) as engine:
        sup = engine.supervisor
        broker = sup.broker
        real = broker.inventory
        gpus = tuple(Gpu(index=i, name=f"gpu{i}", total_bytes=24 << 30, free_bytes=24 << 30)
                     for i in range(2))  # fmt: skip
        broker.inventory = Inventory(real.ram_total_bytes, real.ram_free_bytes, gpus)
        profile, broker.profile = broker.profile, "gpu-max"  # (no call runs: nothing loads)
        try:
            sup.set_replicas("zimage", 2)
            first = await sup.add_replica("zimage")
            second = await sup.add_replica("zimage")
            assert (first.gpu, second.gpu) == (0, 1)
            for replica in (first, second):
                env = environ(replica.pid)
                assert env["CUDA_VISIBLE_DEVICES"] == str(replica.gpu)
                assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
                assert broker.gpu_of(replica.shm_prefix) == replica.gpu
                assert replica.describe()["gpu"] == replica.gpu
            shown = {w["pid"]: w.get("gpu") for w in broker.snapshot()["workers"]}
            assert shown == {first.pid: 0, second.pid: 1}
            sup.set_replicas("zimage", 1)  # the second leaves ...
            sup.set_replicas("zimage", 2)
            third = await sup.add_replica("zimage")  # ... and the next takes the GPU it freed
            assert third is not second and third.gpu == 1
        finally:
            broker.inventory, broker.profile = real, profile
        # one replica sees every GPU, as a single worker always has
        sup.set_replicas("zimage", 1)
        sup.retire_all("zimage")
        alone = await sup.worker("zimage")
        assert alone.gpu is None and "CUDA_VISIBLE_DEVICES" not in environ(alone.pid)
