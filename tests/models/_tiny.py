"""Builds the tiny random Z-Image models the tests use, and diffusers' reference renders, with
the zimage pack's shipped builders (``inline_zimage._demo``, what ``inline demo models`` uses).

Run with a pack venv's python (it needs torch, diffusers, transformers):
``python _tiny.py OUT``. Writes, under OUT:

- ``diffusers/``: a whole ``ZImagePipeline`` folder (``save_pretrained``)
- ``comfy/``: the same weights in the ComfyUI single-file layout (original transformer keys with
  fused qkv, LDM VAE keys, ``model.``-prefixed Qwen3 keys) under ``diffusion_models/``, ``vae/``
  and ``text_encoders/``, plus the tokenizer folder ``text_encoders/qwen_3_4b_tokenizer/``
- ``reference/*.png``: direct ``ZImagePipeline`` renders (the baseline our sampler must match)
- ``report.json``: what was built (parameter counts, reference cases)

The shapes follow ``TINY_MODELS.md`` and the shipped configs (the rope axes are the real ones
scaled to the tiny head width), so the pack's shape-based detection reads them as Z-Image.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch

try:
    import inline_zimage  # noqa: F401  # the zimage pack venv's
except ImportError:  # a bench's interpreter: the pack's sources, beside the primitives' it adds
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "packs" / "zimage" / "src"))
from inline_zimage._demo import (
    SEED,
    ComfyNames,
    build_parts,
    build_tokenizer,
    randomize,
    save_comfy,
    to_ldm_vae,
    to_original_transformer,
)

__all__ = (
    "CASES", "build_tokenizer", "main", "randomize", "to_ldm_vae", "to_original_transformer",
)  # fmt: skip

CASES = [
    {"name": "t2i_seed7", "prompt": "a red fox in snow", "negative": "", "seed": 7,
     "steps": 4, "guidance": 0.0, "width": 256, "height": 256},
    {"name": "cfg_seed3", "prompt": "a lighthouse at dusk", "negative": "blurry", "seed": 3,
     "steps": 3, "guidance": 1.5, "width": 256, "height": 320},
]  # fmt: skip


def main(out: Path) -> None:
    from diffusers import FlowMatchEulerDiscreteScheduler, ZImagePipeline

    started = time.perf_counter()
    torch.manual_seed(SEED)
    comfy = out / "comfy"
    tokenizer = build_tokenizer(comfy / "text_encoders" / "qwen_3_4b_tokenizer")
    text_encoder, transformer, vae = build_parts(tokenizer)
    scheduler = FlowMatchEulerDiscreteScheduler(
        num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=False
    )
    pipe = ZImagePipeline(
        scheduler=scheduler, vae=vae, text_encoder=text_encoder, tokenizer=tokenizer,
        transformer=transformer,
    )  # fmt: skip
    pipe.save_pretrained(str(out / "diffusers"))
    save_comfy(comfy, text_encoder, transformer, vae, ComfyNames())

    # diffusers' reference renders, from the saved folder, offline
    ref = out / "reference"
    ref.mkdir(exist_ok=True)
    loaded = ZImagePipeline.from_pretrained(str(out / "diffusers"), local_files_only=True)
    loaded.set_progress_bar_config(disable=True)
    for case in CASES:
        image = loaded(
            prompt=case["prompt"], negative_prompt=case["negative"] or None,
            height=case["height"], width=case["width"], num_inference_steps=case["steps"],
            guidance_scale=case["guidance"],
            generator=torch.Generator("cpu").manual_seed(case["seed"]),
        ).images[0]  # fmt: skip
        image.save(ref / f"{case['name']}.png")
    report = {
        "cases": CASES,
        "params": {
            "transformer": sum(p.numel() for p in transformer.parameters()),
            "vae": sum(p.numel() for p in vae.parameters()),
            "text_encoder": sum(p.numel() for p in text_encoder.parameters()),
        },
        "seconds": round(time.perf_counter() - started, 2),
    }
    (out / "report.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
