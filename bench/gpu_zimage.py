"""Full-size Z-Image Turbo on one GPU: our sampler vs diffusers' ``ZImagePipeline``.

One command on a CUDA machine with torch, diffusers, transformers, tokenizers and accelerate
installed (nothing is downloaded): ``python bench/gpu_zimage.py``. It builds the real
architecture (6.15 B transformer, Qwen3-4B text encoder, FLUX.1 VAE) with random bf16 weights
straight on the GPU, a small trained stand-in tokenizer, then times 1024x1024, 8 steps, warm:
the primitives library's encode / sample / decode (what ``alibaba/z-image-turbo`` runs) against a
``ZImagePipeline`` call over the very same modules. Prints and writes
bench/results/gpu_zimage.json (seconds per image each, ``ratio_vs_diffusers``).

``gpu_zimage``, ``gpu_batching``, ``gpu_compile`` and ``gpu_memory`` take ``--smoke``: the same
code on the CPU with the tiny demo models (``inline_zimage._demo``), 128x128, 2 steps, one run, so
the suite keeps the scripts working on a machine without a GPU (tests/models/test_gpu_scripts.py).
Its figures mean nothing and go to ``bench/results/<name>.smoke.json``.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# the project's sources, for a Python that holds only the libraries (a lent GPU machine's)
for _extra in ("sdk/src", "core/src", "packs/zimage/src", "packs/primitives/src", "tests/models"):
    sys.path.insert(0, str(HERE.parent / _extra))

#: The CPU dry run of the same code (module docstring).
SMOKE = "--smoke" in sys.argv[1:]
DEVICE = "cpu" if SMOKE else "cuda"


def scaled(size: int, steps: int, runs: int) -> tuple[int, int, int]:
    """The script's image size, steps and timed runs; the smoke run's instead."""
    return (128, 2, 1) if SMOKE else (size, steps, runs)


SIZE, STEPS, RUNS = scaled(1024, 8, 5)
PROMPT = "a red fox in snow, 35mm photograph"


def need_gpu() -> None:
    import torch

    assert SMOKE or torch.cuda.is_available(), "this benchmark needs a CUDA GPU (or --smoke)"


def sync() -> None:
    """Wait for the GPU's queued work (the timers read wall time)."""
    import torch

    if not SMOKE:
        torch.cuda.synchronize()


def gpu_name() -> str:
    import torch

    return "cpu (smoke)" if SMOKE else torch.cuda.get_device_name(0)


def peak_bytes() -> int:
    """The GPU memory high mark since the last ``reset_peak`` (0 in the smoke run)."""
    import torch

    return 0 if SMOKE else torch.cuda.max_memory_allocated()


def peak_gb() -> float:
    return round(peak_bytes() / 1e9, 2)


def reset_peak() -> None:
    """Free the allocator's cached blocks and restart the high mark."""
    import torch

    if not SMOKE:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def write(name: str, figures: dict) -> Path:
    """``_common.write_result``, to ``<name>.smoke.json`` in the smoke run."""
    from _common import write_result

    return write_result(f"{name}.smoke" if SMOKE else name, figures)


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
    """The transformer, VAE and text encoder on ``device``: the real architecture with random
    bf16 weights, or in the smoke run the tiny demo models on the CPU."""
    import torch

    if SMOKE:
        from inline_zimage._demo import build_parts, build_tokenizer

        with tempfile.TemporaryDirectory() as tmp:
            text_encoder, transformer, vae = build_parts(build_tokenizer(Path(tmp) / "tok"))
        return transformer, vae, text_encoder
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

    need_gpu()
    device = DEVICE
    started = time.perf_counter()
    transformer, vae, text_encoder = build(device)
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = build_tokenizer(Path(tmp) / "tok")
    built_s = time.perf_counter() - started
    te = TextEncoder(text_encoder, tokenizer, "random", device)

    def ours(seed: int) -> float:
        sync()
        t0 = time.perf_counter()
        cond = encode_prompts(te, [PROMPT])
        h, w = latent_size(SIZE, SIZE)
        x = torch.zeros((1, 16, h, w), dtype=torch.float32)
        out = sample(transformer, cond, None, x, steps=STEPS, guidance=0.0, sampler="euler",
                     scheduler="simple", seed=seed)  # fmt: skip
        encode_png(decode(vae, out)[0])
        sync()
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

        sync()
        t0 = time.perf_counter()
        image = pipe(PROMPT, height=SIZE, width=SIZE, num_inference_steps=STEPS,
                     guidance_scale=0.0,
                     generator=torch.Generator("cpu").manual_seed(seed)).images[0]  # fmt: skip
        image.save(io.BytesIO(), format="PNG")
        sync()
        return time.perf_counter() - t0

    for seed in range(2):
        ours(seed)
        theirs(seed)
    a, b = [], []
    for i in range(RUNS):
        a.append(ours(10 + i))
        b.append(theirs(10 + i))
    figures = {
        "gpu": gpu_name(),
        "ours_s_per_image": round(statistics.median(a), 4),
        "diffusers_s_per_image": round(statistics.median(b), 4),
        "ratio_vs_diffusers": round(statistics.median(a) / statistics.median(b), 4),
        "width": SIZE, "height": SIZE, "steps": STEPS, "runs": RUNS, "dtype": "bfloat16",
        "transformer_params": sum(p.numel() for p in transformer.parameters()),
        "build_s": round(built_s, 1),
        "peak_vram_gb": peak_gb(),
    }  # fmt: skip
    write("gpu_zimage", figures)


if __name__ == "__main__":
    main()
