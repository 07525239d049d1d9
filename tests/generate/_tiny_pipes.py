"""Builds tiny random-weight diffusers pipelines of two families and diffusers' own renders,
with the diffusers pack's shipped builders (``inline_diffusers._demo``).

Run with a pack venv's interpreter: ``python _tiny_pipes.py OUT``. Writes
``OUT/diffusers/tiny-sd`` (StableDiffusionPipeline: UNet2DConditionModel, CLIP text encoder),
``OUT/diffusers/tiny-pixart`` (PixArtAlphaPipeline: PixArtTransformer2DModel, T5 encoder), each
with a locally trained BPE tokenizer, and ``OUT/reference/<case>.png`` rendered by a plain
``from_pretrained(..., local_files_only=True)`` pipeline call, with ``OUT/cases.json``; and
``OUT/checkpoints/tiny-sd.safetensors``, tiny-sd as one original-layout (LDM) checkpoint.
"""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TORCHAO_FORCE_SKIP_LOADING_SO_FILES", "1")
import torch
from inline_diffusers._demo import SEED, build_pixart, build_sd
from inline_diffusers._ldm import single_file

CASES = [
    {"name": "sd", "model": "tiny-sd", "prompt": "a red fox in the snow", "negative": "blurry",
     "width": 96, "height": 64, "steps": 3, "guidance": 5.0, "seed": 7},
    {"name": "pixart", "model": "tiny-pixart", "prompt": "a lighthouse at dusk", "negative": "",
     "width": 64, "height": 64, "steps": 2, "guidance": 4.5, "seed": 11},
    {"name": "sd-img2img", "model": "tiny-sd", "prompt": "a cat wearing a hat", "negative": "",
     "width": 64, "height": 64, "steps": 4, "guidance": 3.0, "seed": 5, "strength": 0.5},
]  # fmt: skip


def init_image() -> bytes:
    from PIL import Image

    img = Image.new("RGB", (64, 64), (200, 40, 40))
    for x in range(64):
        for y in range(32, 64):
            img.putpixel((x, y), (x * 4, 255 - x * 4, 90))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def main(out: Path) -> None:
    from diffusers import AutoPipelineForImage2Image, DiffusionPipeline
    from PIL import Image

    torch.manual_seed(SEED)
    sd = build_sd(out)
    build_pixart(out)
    # the same weights as one ComfyUI-style checkpoint (no configs named: found by family)
    single_file(sd, out / "checkpoints" / "tiny-sd.safetensors")
    ref = out / "reference"
    ref.mkdir(exist_ok=True)
    (out / "init.png").write_bytes(init_image())
    for case in CASES:
        folder = str(out / "diffusers" / case["model"])
        kwargs = {
            "prompt": case["prompt"],
            "num_inference_steps": case["steps"], "guidance_scale": case["guidance"],
            "generator": torch.Generator("cpu").manual_seed(case["seed"]),
        }  # fmt: skip
        if case["negative"]:  # else the pipeline's own default
            kwargs["negative_prompt"] = case["negative"]
        if "strength" in case:
            pipe = AutoPipelineForImage2Image.from_pretrained(folder, local_files_only=True)
            kwargs["image"] = Image.open(out / "init.png").convert("RGB")
            kwargs["strength"] = case["strength"]
        else:
            pipe = DiffusionPipeline.from_pretrained(folder, local_files_only=True)
            kwargs.update(width=case["width"], height=case["height"])
        pipe.set_progress_bar_config(disable=True)
        pipe(**kwargs).images[0].save(ref / f"{case['name']}.png")
    (out / "cases.json").write_text(json.dumps(CASES, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
