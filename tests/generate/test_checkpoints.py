"""diffusers/generate on a single-file checkpoint (ComfyUI's ``models/checkpoints/``): the
weights of one original-layout file with the configs of a diffusers folder of its family, and a
ComfyUI ``CheckpointLoaderSimple`` workflow run end to end on it."""

from __future__ import annotations

import json
import os
import shutil
import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from inline_host import Settings
from inline_host.comfyui import import_comfyui

from .conftest import MESHPACK, TinyPipes
from .test_diffusers import case_params, failure, graph, mean_abs_diff, pixels, render

pytestmark = pytest.mark.anyio
#: The folder diffusers names for a Stable Diffusion 1.x file (its repo's own name).
SD1_CONFIGS = "stable-diffusion-v1-5"


def fake_checkpoint(path: Path, key: str) -> None:
    """A safetensors file of one float32 tensor named ``key`` (a family's telltale key)."""
    header = json.dumps({key: {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + bytes(16))


@pytest.fixture(scope="module")
def settings(gen_data_dir: Path, module_dir: Path, pipes: TinyPipes) -> Settings:
    """Models: the tiny checkpoint, and its family's configs as a folder WITHOUT weights (so a
    render proves the weights came from the file); a pickle and an SDXL file with no configs."""
    models = module_dir / "models"
    shutil.copytree(pipes.root / "checkpoints", models / "checkpoints", dirs_exist_ok=True)
    configs = models / "diffusers" / SD1_CONFIGS
    shutil.copytree(pipes.root / "diffusers" / "tiny-sd", configs, dirs_exist_ok=True)
    for weights in configs.rglob("*.safetensors"):
        weights.unlink()
    xl = "conditioner.embedders.1.model.transformer.resblocks.9.mlp.c_proj.bias"
    fake_checkpoint(models / "checkpoints" / "sdxl-base.safetensors", xl)
    (models / "checkpoints" / "old.ckpt").write_bytes(b"not loaded")
    inputs = module_dir / "inputs"
    inputs.mkdir(exist_ok=True)
    base = Settings.from_env(
        {
            "INLINE_SANDBOX_READ": os.environ.get("INLINE_SANDBOX_READ", ""),
            "INLINE_DATA_DIR": str(gen_data_dir),
            "INLINE_MODELS_DIR": str(models),
            "INLINE_INPUT_ROOTS": str(inputs),
        }
    )
    return replace(base, extra_packs=(MESHPACK,), cancel_grace=30.0)


def sd_params(pipes: TinyPipes) -> dict[str, Any]:
    params = case_params(pipes, "sd")
    del params["model"]
    return {**params, "checkpoint": "tiny-sd.safetensors"}


async def test_a_checkpoint_renders_as_its_pipeline_folder(engine, pipes: TinyPipes):
    c = pipes.case("sd")
    served = engine.descriptor("diffusers/generate")
    picker = next(p for p in served.params if p.key == "checkpoint")
    assert picker.options_from == "checkpoints"
    assert "tiny-sd.safetensors" in [o.value for o in picker.options]
    value, data = await render(engine, graph(sd_params(pipes), c["prompt"]))
    # the configs folder holds no weight: these are the file's, renamed back by diffusers
    assert mean_abs_diff(data, pipes.reference("sd")) <= 1.0
    p = value.params
    assert p is not None and p["checkpoint"] == "tiny-sd.safetensors"
    assert p["model"] == SD1_CONFIGS and p["pipeline"] == "StableDiffusionPipeline"
    # naming the configs folder gives the same pixels
    named, again = await render(
        engine, graph({**sd_params(pipes), "model": SD1_CONFIGS}, c["prompt"])
    )
    assert named.params is not None and named.params["model"] == SD1_CONFIGS
    assert np.array_equal(pixels(again), pixels(data))


async def test_a_checkpoint_without_its_familys_configs_names_the_import(engine):
    err = await failure(engine, graph({"checkpoint": "sdxl-base.safetensors", "steps": 1}, "a"))
    message = err.remote_message
    assert "Stable Diffusion XL" in message, message
    assert "inline models import stabilityai/stable-diffusion-xl-base-1.0" in message
    assert "Traceback" not in message


async def test_a_pickle_checkpoint_is_refused_unread(engine):
    err = await failure(engine, graph({"checkpoint": "old.ckpt", "steps": 1}, "a"))
    assert "is a pickle" in err.remote_message and ".safetensors" in err.remote_message
    missing = await failure(engine, graph({"checkpoint": "nope.safetensors", "steps": 1}, "a"))
    assert "no checkpoint 'nope.safetensors'" in missing.remote_message
    assert "tiny-sd.safetensors" in missing.remote_message  # what is there


async def test_a_comfyui_checkpoint_workflow_runs_on_the_checkpoint(engine, pipes: TinyPipes):
    c = pipes.case("sd")
    prompt = {  # ComfyUI's default SD 1.5 workflow (API format), at the tiny case's values
        "3": {"class_type": "KSampler", "inputs": {
            "cfg": c["guidance"], "denoise": 1, "latent_image": ["5", 0], "model": ["4", 0],
            "negative": ["7", 0], "positive": ["6", 0], "sampler_name": "euler",
            "scheduler": "normal", "seed": c["seed"], "steps": c["steps"]}},
        "4": {"class_type": "CheckpointLoaderSimple",
              "inputs": {"ckpt_name": "tiny-sd.safetensors"}},
        "5": {"class_type": "EmptyLatentImage",
              "inputs": {"batch_size": 1, "height": c["height"], "width": c["width"]}},
        "6": {"class_type": "CLIPTextEncode", "inputs": {"clip": ["4", 1], "text": c["prompt"]}},
        "7": {"class_type": "CLIPTextEncode",
              "inputs": {"clip": ["4", 1], "text": c["negative"]}},
        "8": {"class_type": "VAEDecode", "inputs": {"samples": ["3", 0], "vae": ["4", 2]}},
        "9": {"class_type": "SaveImage",
              "inputs": {"filename_prefix": "fox", "images": ["8", 0]}},
    }  # fmt: skip
    imported = import_comfyui(json.dumps(prompt).encode())
    assert imported.report.complete and imported.document["outputNames"] == {"3": "fox"}
    _, data = await render(engine, imported.document)
    assert mean_abs_diff(data, pipes.reference("sd")) <= 1.0
