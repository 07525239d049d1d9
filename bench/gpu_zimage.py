"""Full-size Z-Image Turbo on one GPU: our sampler vs diffusers' ``ZImagePipeline``.

One command on a CUDA machine with torch, diffusers, transformers, tokenizers and accelerate
installed (nothing is downloaded): ``python bench/gpu_zimage.py``. It builds the real
architecture (6.15 B transformer, Qwen3-4B text encoder, FLUX.1 VAE) with random bf16 weights
straight on the GPU, a small trained stand-in tokenizer, then times 1024x1024, 8 steps, warm:
the primitives library's encode / sample / decode (what ``alibaba/z-image-turbo`` runs) against a
``ZImagePipeline`` call over the very same modules. Prints and writes
bench/results/gpu_zimage.json (seconds per image each, ``ratio_vs_diffusers``).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "packs" / "primitives" / "src"))
sys.path.insert(0, str(HERE.parent / "tests" / "models"))

SIZE, STEPS, RUNS, PROMPT = 1024, 8, 5, "a red fox in snow, 35mm photograph"


def fill_random_(module, generator) -> None:
    """Random weights a real model could have: norms at 1, everything else N(0, 0.02)."""
    import torch

    with torch.no_grad():
        for name, p in module.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02, generator=generator)


def build(device: str):
    import torch
    from diffusers import AutoencoderKL, ZImageTransformer2DModel
    from inline_primitives import ZIMAGE
    from transformers import Qwen3Config, Qwen3Model

    comps = {c.kind: c for c in ZIMAGE.components}

    def random_module(make):
        from accelerate import init_empty_weights

        with init_empty_weights():
            module = make()
        module.to_empty(device=device)
        fill_random_(module, torch.Generator(device).manual_seed(0))
        return module.to(torch.bfloat16).eval().requires_grad_(False)

    t_cfg = {k: v for k, v in comps["diffusion"].shipped_config().items() if not k.startswith("_")}
    v_cfg = {k: v for k, v in comps["vae"].shipped_config().items() if not k.startswith("_")}
    te_cfg = Qwen3Config.from_dict(comps["text_encoder"].shipped_config())
    transformer = random_module(lambda: ZImageTransformer2DModel.from_config(t_cfg))
    vae = random_module(lambda: AutoencoderKL.from_config(v_cfg))
    text_encoder = random_module(lambda: Qwen3Model(te_cfg))
    for m in (transformer, vae, text_encoder):  # buffers made at construction
        m.to(device)
    return transformer, vae, text_encoder


def main() -> None:
    import torch
    from _tiny import build_tokenizer
    from diffusers import FlowMatchEulerDiscreteScheduler, ZImagePipeline
    from inline_primitives._images import decode, encode_png, latent_size
    from inline_primitives._sampling import sample
    from inline_primitives._text import TextEncoder, encode_prompts

    assert torch.cuda.is_available(), "this benchmark needs a CUDA GPU"
    device = "cuda"
    started = time.perf_counter()
    transformer, vae, text_encoder = build(device)
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = build_tokenizer(Path(tmp) / "tok")
    built_s = time.perf_counter() - started
    te = TextEncoder(text_encoder, tokenizer, "random", device)

    def ours(seed: int) -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        cond = encode_prompts(te, [PROMPT])
        h, w = latent_size(SIZE, SIZE)
        x = torch.zeros((1, 16, h, w), dtype=torch.float32)
        out = sample(transformer, cond, None, x, steps=STEPS, guidance=0.0, sampler="euler",
                     scheduler="simple", seed=seed)  # fmt: skip
        encode_png(decode(vae, out)[0])
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    pipe = ZImagePipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(
            num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=False
        ),
        vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, transformer=transformer,
    )  # fmt: skip
    pipe.set_progress_bar_config(disable=True)

    def theirs(seed: int) -> float:
        import io

        torch.cuda.synchronize()
        t0 = time.perf_counter()
        image = pipe(PROMPT, height=SIZE, width=SIZE, num_inference_steps=STEPS,
                     guidance_scale=0.0,
                     generator=torch.Generator("cpu").manual_seed(seed)).images[0]  # fmt: skip
        image.save(io.BytesIO(), format="PNG")
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    for seed in range(2):
        ours(seed)
        theirs(seed)
    a, b = [], []
    for i in range(RUNS):
        a.append(ours(10 + i))
        b.append(theirs(10 + i))
    figures = {
        "gpu": torch.cuda.get_device_name(0),
        "ours_s_per_image": round(statistics.median(a), 4),
        "diffusers_s_per_image": round(statistics.median(b), 4),
        "ratio_vs_diffusers": round(statistics.median(a) / statistics.median(b), 4),
        "width": SIZE, "height": SIZE, "steps": STEPS, "runs": RUNS, "dtype": "bfloat16",
        "transformer_params": sum(p.numel() for p in transformer.parameters()),
        "build_s": round(built_s, 1),
        "peak_vram_gb": round(torch.cuda.max_memory_allocated() / 1e9, 2),
    }  # fmt: skip
    print(json.dumps(figures, indent=2))
    out = HERE / "results" / "gpu_zimage.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
