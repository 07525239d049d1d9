"""A tiny Z-Image render through a Ray actor, and through a Ray Serve deployment, gives the
bytes the local launcher gives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from inline_host import Engine
from inline_host.runs import DeploymentService, RunStore
from inline_sdk.protocol import MediaValue

from ..e2e._graphs import n, request
from ..models.conftest import Tiny, install_comfy_layout
from ._cluster import Cluster
from .conftest import make_settings

# the session cluster starts inside the first test (minutes on a loaded 2-core machine)
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(1800)]


def one_click() -> dict[str, Any]:
    params = {"width": 256, "height": 256, "steps": 2, "seed": 11}
    return request(
        "z",
        n("p", "input/text", {"text": "a red fox in snow"}),
        n("z", "alibaba/z-image-turbo", params, prompt=("p", "text")),
    )


async def render(engine: Engine) -> bytes:
    result = await engine.run(one_click())
    assert isinstance(result.outputs["image"].value, MediaValue)
    return engine.read_bytes(result.outputs["image"])


async def test_tiny_zimage_through_ray_gives_the_local_bytes(
    cluster: Cluster, model_data_dir: Path, tiny: Tiny, tmp_path: Path
) -> None:
    install_comfy_layout(tiny, tmp_path / "models")
    async with Engine.open(make_settings(model_data_dir, tmp_path, "", packs=())) as engine:
        expected = await render(engine)
    async with Engine.open(
        make_settings(model_data_dir, tmp_path, cluster.address, packs=())
    ) as engine:
        assert await render(engine) == expected
        info = engine.supervisor.workers()["zimage"].describe()
    assert info["launcher"] == "ray"
    demand = info["ray"]["demand"]
    # a GPU pack: the cluster has no GPU, so it asked for none and said so
    assert demand["numGpus"] == 0 and "no GPU" in demand["note"]
    # its memory ask is the broker's estimate of the model files it found
    assert demand["memory"] > 0

    # through a Serve deployment (a replica's worker on a cluster node; bytes through Ray)
    settings = make_settings(model_data_dir, tmp_path, cluster.address, packs=())
    async with Engine.open(settings) as engine, anyio.create_task_group() as tg:
        service = DeploymentService(engine, RunStore(tmp_path / "serve.db"))
        await service.start(tg)
        await service.create({"node": "alibaba/z-image-turbo", "replicas": 1})
        view = await service.until_ready("alibaba-z-image-turbo", 900)
        assert view is not None and view.state == "ready", view
        assert engine.supervisor.served("zimage") is not None
        assert await render(engine) == expected
        assert not engine.supervisor.pool("zimage")  # no local worker took part
        assert await service.delete("alibaba-z-image-turbo")
        tg.cancel_scope.cancel()
