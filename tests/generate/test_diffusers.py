"""diffusers/generate through a real worker on tiny random pipelines of two families (Stable
Diffusion: UNet + CLIP; PixArt-Alpha: transformer + T5), against diffusers' own pipeline call."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
from inline_core import GraphInvalid, NodeFailed, NullListener
from inline_host import Engine, NodeError
from inline_sdk.protocol import MediaValue, Preview, Progress
from PIL import Image

from ..e2e._graphs import n, request
from .conftest import TinyPipes

pytestmark = pytest.mark.anyio


class Events(NullListener):
    def __init__(self) -> None:
        self.items: list[Any] = []
        self.sampling = anyio.Event()

    def node_progress(self, node_id: str, event: Any) -> None:
        self.items.append(event)
        if isinstance(event, Progress) and event.phase == "sample":
            self.sampling.set()

    def steps(self) -> list[Progress]:
        return [e for e in self.items if isinstance(e, Progress) and e.phase == "sample"]


def pixels(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), dtype=np.float64)


def mean_abs_diff(a: bytes, b: bytes) -> float:
    x, y = pixels(a), pixels(b)
    assert x.shape == y.shape, (x.shape, y.shape)
    return float(np.abs(x - y).mean())


def graph(params: dict[str, Any], prompt: str, image: str | None = None) -> dict[str, Any]:
    nodes = [n("p", "input/text", {"text": prompt})]
    inputs: dict[str, Any] = {"prompt": ("p", "text")}
    if image is not None:
        nodes.append(n("i", "input/image", {"asset": {"ref": "path", "path": image}}))
        inputs["image"] = ("i", "image")
    nodes.append(n("g", "diffusers/generate", params, **inputs))
    return request("g", *nodes)


def case_params(pipes: TinyPipes, name: str) -> dict[str, Any]:
    c = pipes.case(name)
    params = {
        "model": c["model"],
        "steps": c["steps"],
        "guidance": c["guidance"],
        "seed": c["seed"],
    }
    if c["negative"]:
        params["negative_prompt"] = c["negative"]
    if "strength" in c:
        params["strength"] = c["strength"]
    else:
        params.update(width=c["width"], height=c["height"])
    return params


async def render(engine: Engine, doc: dict[str, Any], listener: Any = None) -> MediaValue:
    engine.cache.clear()
    result = await engine.run(doc, listener)
    value = result.outputs["image"]
    assert isinstance(value.value, MediaValue)
    return value.value, engine.read_bytes(value)


async def failure(engine: Engine, doc: dict[str, Any]) -> NodeError:
    engine.cache.clear()
    with pytest.raises(NodeFailed) as err:
        await engine.run(doc)
    assert isinstance(err.value.__cause__, NodeError), err.value
    return err.value.__cause__


async def test_the_model_picker_lists_the_pipeline_folders(engine: Engine):
    served = engine.descriptor("diffusers/generate")
    assert served is not None and served.output_kind == "image"
    model = next(p for p in served.params if p.key == "model")
    assert model.options_from == "diffusers"
    assert [o.value for o in model.options] == ["tiny-pixart", "tiny-sd"]
    assert [p.id for p in served.inputs] == ["prompt", "image"]
    keys = [p.key for p in served.params]
    for key in ("negative_prompt", "width", "height", "steps", "guidance", "seed", "strength"):
        assert key in keys


@pytest.mark.parametrize("case", ["sd", "pixart"])
async def test_renders_as_a_plain_pipeline_call(engine: Engine, pipes: TinyPipes, case: str):
    c = pipes.case(case)
    events = Events()
    value, data = await render(engine, graph(case_params(pipes, case), c["prompt"]), events)
    assert mean_abs_diff(data, pipes.reference(case)) <= 1.0
    p = value.params
    assert p is not None
    assert (p["width"], p["height"]) == (c["width"], c["height"])
    assert (p["seed"], p["steps"], p["guidance"], p["model"]) == (
        c["seed"], c["steps"], c["guidance"], c["model"]
    )  # fmt: skip
    # a progress event per step, whichever callback the family has
    assert [e.step for e in events.steps()] == list(range(1, c["steps"] + 1))
    assert p["vae_tiling"] is False  # under 1024x1024


async def test_the_vae_is_tiled_from_1024_up(engine: Engine):
    doc = graph({"model": "tiny-sd", "steps": 1, "seed": 4, "width": 1024, "height": 1024}, "a")
    value, data = await render(engine, doc)
    assert value.params is not None and value.params["vae_tiling"] is True
    assert Image.open(io.BytesIO(data)).size == (1024, 1024)


async def test_defaults_are_the_pipelines_own(engine: Engine):
    value, data = await render(
        engine, graph({"model": "tiny-pixart", "steps": 2, "seed": 3}, "a cat wearing a hat")
    )
    p = value.params
    assert p is not None
    # PixArtAlphaPipeline's guidance default is 4.5; its size is sample_size x VAE scale
    assert p["guidance"] == 4.5 and (p["width"], p["height"]) == (256, 256)
    assert Image.open(io.BytesIO(data)).size == (256, 256)
    assert p["pipeline"] == "PixArtAlphaPipeline" and p["compile"] == "eager"


async def test_img2img_through_the_familys_pipeline(engine: Engine, pipes: TinyPipes, settings):
    c = pipes.case("sd-img2img")
    init = str(settings.input_roots[0] / "init.png")
    events = Events()
    value, data = await render(
        engine, graph(case_params(pipes, "sd-img2img"), c["prompt"], init), events
    )
    assert mean_abs_diff(data, pipes.reference("sd-img2img")) <= 1.0
    assert value.params is not None and value.params["strength"] == 0.5
    assert value.params["pipeline"] == "StableDiffusionImg2ImgPipeline"
    # strength 0.5 of 4 steps runs the last 2
    assert [e.step_count for e in events.steps()] == [2, 2]


async def test_a_family_without_img2img_says_so(engine: Engine, settings):
    init = str(settings.input_roots[0] / "init.png")
    err = await failure(engine, graph({"model": "tiny-pixart", "steps": 1}, "a fox", init))
    assert "PixArtAlphaPipeline" in err.remote_message
    assert "image-to-image" in err.remote_message


async def test_a_param_the_pipeline_does_not_take_is_refused(engine: Engine):
    # strength without an image: StableDiffusionPipeline.__call__ takes none
    err = await failure(engine, graph({"model": "tiny-sd", "steps": 1, "strength": 0.4}, "a fox"))
    assert err.remote_type == "ParamRefused"
    assert "StableDiffusionPipeline" in err.remote_message and "'strength'" in err.remote_message


async def test_sizes_must_be_ones_the_pipeline_makes(engine: Engine):
    # off the declared grid (multiples of 8, the VAE scale factor of every family): refused at
    # submit, naming the valid neighbours
    with pytest.raises(GraphInvalid) as invalid:
        engine.prepare(graph({"model": "tiny-sd", "width": 500, "steps": 1}, "a fox"))
    issues = str(invalid.value.issues)
    assert "'width'" in issues and "496 and 504" in issues
    # on it, a size Stable Diffusion makes (a multiple of its VAE scale factor, 8) renders...
    value, _ = await render(
        engine, graph({"model": "tiny-sd", "width": 72, "height": 64, "steps": 1}, "a fox")
    )
    assert value.params is not None and (value.params["width"], value.params["height"]) == (72, 64)
    # ... and PixArt (VAE scale 8 x patch 2) refuses it, saying what it makes
    err = await failure(engine, graph({"model": "tiny-pixart", "width": 72, "steps": 1}, "a fox"))
    assert "width 72" in err.remote_message and "multiple of 16" in err.remote_message
    err = await failure(engine, graph({"model": "nope", "steps": 1}, "a fox"))
    assert "no pipeline folder 'nope'" in err.remote_message and "tiny-sd" in err.remote_message


async def test_previews_and_cancel_at_a_step(engine: Engine):
    events = Events()
    doc = graph({"model": "tiny-sd", "steps": 400, "seed": 1, "width": 64, "height": 64}, "x")
    engine.cache.clear()
    async with anyio.create_task_group() as tg:
        scope = anyio.CancelScope()

        async def run() -> None:
            with scope:
                await engine.run(doc, events)

        tg.start_soon(run)
        with anyio.fail_after(300):  # generous: a loaded 2-core machine runs slow steps
            await events.sampling.wait()
            while len(events.steps()) < 10 or not any(isinstance(e, Preview) for e in events.items):
                await anyio.sleep(0.01)
        scope.cancel()
    assert scope.cancelled_caught
    worker = engine.supervisor.workers()["diffusers"]
    with anyio.fail_after(30):
        while worker.running:
            await anyio.sleep(0.01)
    assert worker.alive
    assert max(e.step for e in events.steps()) < 400


async def test_the_pipeline_stays_loaded_and_is_freed_on_switching(engine: Engine):
    def held() -> set[str]:
        snap = engine.supervisor.broker.snapshot()
        names: set[str] = set()
        for worker in snap["workers"]:
            names.update(m["file"] for m in worker["models"])
        return names

    await render(engine, graph({"model": "tiny-sd", "steps": 1, "seed": 1}, "a"))
    pid = engine.supervisor.workers()["diffusers"].pid
    assert any(name.startswith("tiny-sd/") for name in held())
    await render(engine, graph({"model": "tiny-pixart", "steps": 2, "seed": 1}, "a"))
    names = held()
    assert any(name.startswith("tiny-pixart/") for name in names)
    assert not any(name.startswith("tiny-sd/") for name in names)
    assert engine.supervisor.workers()["diffusers"].pid == pid


def tensor_bytes(component: Path) -> int:
    """The bytes of every tensor in a component's safetensors files, read from their headers
    (an 8-byte little-endian length, then JSON with each tensor's data offsets)."""
    total = 0
    for file in component.glob("*.safetensors"):
        with file.open("rb") as f:
            header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
        total += sum(end - start for k, t in header.items() if k != "__metadata__"
                     for start, end in [t["data_offsets"]])  # fmt: skip
    return total


async def test_the_estimate_is_each_components_weights_placed_by_the_broker(
    engine: Engine, settings
):
    await render(engine, graph({"model": "tiny-sd", "steps": 1, "seed": 2}, "a"))
    snap = engine.supervisor.broker.snapshot()
    (held,) = [w["models"] for w in snap["workers"] if w["pack"] == "diffusers"]
    folder = settings.models_dir / "diffusers" / "tiny-sd"
    weighted = sorted(p.name for p in folder.iterdir() if any(p.glob("*.safetensors")))
    assert weighted == ["text_encoder", "unet", "vae"]  # no scheduler, no tokenizer
    assert {m["file"]: m["bytes"] for m in held} == {
        f"tiny-sd/{name}": tensor_bytes(folder / name) for name in weighted
    }
    assert {m["plan"]["device"] for m in held} == {"cpu"}  # the broker's plan, applied


async def test_compile_off_cuda_runs_eager_and_says_so(engine: Engine, settings):
    models = settings.models_dir / "diffusers"
    if not (models / "tiny-sd-compiled").exists():
        shutil.copytree(models / "tiny-sd", models / "tiny-sd-compiled")
        (models / "tiny-sd-compiled" / "inline.json").write_text('{"compile": true}')
    value, _ = await render(engine, graph({"model": "tiny-sd-compiled", "steps": 1}, "a"))
    assert value.params is not None and value.params["compile"] == "eager"
    log = (settings.data_dir / "logs" / "diffusers.log").read_text()
    assert "tiny-sd-compiled: compile asked for, but not on CUDA: eager" in log
