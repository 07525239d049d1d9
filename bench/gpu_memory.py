"""Full-size Z-Image Turbo under simulated 8 GB and 16 GB VRAM budgets: the plan, peak VRAM, speed.

One command on a CUDA machine with torch, torchao, diffusers, transformers, tokenizers and
accelerate installed (nothing is downloaded): ``python bench/gpu_memory.py``. It builds the real
architecture (6.15 B transformer, Qwen3-4B text encoder, FLUX.1 VAE) with random bf16 weights in
system RAM once; for each budget it asks the memory policy (``inline_core.place``, the real
component sizes, the probed GPU, ``Budget(vram_bytes=...)``) for a plan, applies it with the
primitives library's ``apply_placement`` (int8 weight-only through torchao, model / sequential
offload through accelerate hooks) to a copy,
and renders 1024x1024, 8 steps, warm. Prints and writes bench/results/gpu_memory.json: per budget
the plan chosen, ``peak_vram_gb`` (``torch.cuda.max_memory_allocated`` over the renders), whether
the peak stayed within the budget, and seconds per image.
"""

from __future__ import annotations

import copy
import gc
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from gpu_zimage import (  # noqa: E402
    DEVICE,
    PROMPT,
    SMOKE,
    gpu_name,
    need_gpu,
    peak_bytes,
    reset_peak,
    scaled,
    sync,
    write,
)  # fmt: skip

SIZE, STEPS, RUNS = scaled(1024, 8, 3)
BUDGETS_GB = (8, 16)
GB = 1e9
#: The Comfy-Org files' real sizes (shared/data/zimage/FACTS.md).
SIZES = {
    "diffusion": ("diffusion", 6_154_908_736, 12_309_866_400),
    "text_encoder": ("text-encoder", 4_022_468_096, 8_044_982_048),
    "vae": ("vae", 83_819_683, 335_304_388),
}


def build_cpu():
    """The three components with random bf16 weights in system RAM (the smoke run: tiny),
    filled on the GPU (seconds; the CPU takes minutes for 10 B weights), then moved."""
    from gpu_zimage import build

    transformer, vae, text_encoder = build(DEVICE)
    parts = {"diffusion": transformer, "vae": vae, "text_encoder": text_encoder}
    parts = {k: m.to("cpu") for k, m in parts.items()}
    reset_peak()
    return parts


def plan_for(budget_gb: float):
    import psutil
    import torch
    from inline_core import Budget, Component, Estimate, Gpu, Inventory, activation_bytes, place

    if SMOKE:  # a 24 GB card, as far as the plan goes
        free, total, name, bf16 = 23 << 30, 24 << 30, gpu_name(), True
    else:
        free, total = torch.cuda.mem_get_info()
        name, bf16 = torch.cuda.get_device_name(0), torch.cuda.is_bf16_supported()

    vm = psutil.virtual_memory()
    inventory = Inventory(
        ram_total_bytes=vm.total,
        ram_free_bytes=vm.available,
        gpus=(Gpu(0, name, total, free, bf16),),
    )
    estimate = Estimate(
        components=tuple(Component(k, r, p, b) for k, (r, p, b) in SIZES.items()),
        activation_bytes=activation_bytes(SIZE, SIZE),
    )
    return place(inventory, estimate, "gpu-max", Budget(vram_bytes=int(budget_gb * (1 << 30))))


def render(te, modules: dict, seed: int) -> float:
    """One 1024x1024 image through the primitives library; seconds."""
    import torch
    from inline_primitives._images import decode, encode_png, latent_size
    from inline_primitives._sampling import sample
    from inline_primitives._text import encode_prompts

    sync()
    t = time.perf_counter()
    cond = encode_prompts(te, [PROMPT])
    h, w = latent_size(SIZE, SIZE)
    x = torch.zeros((1, 16, h, w), dtype=torch.float32)
    out = sample(modules["diffusion"], cond, None, x, steps=STEPS, guidance=0.0,
                 sampler="euler", scheduler="simple", seed=seed)  # fmt: skip
    encode_png(decode(modules["vae"], out)[0])
    sync()
    return time.perf_counter() - t


def run_budget(placement, pristine: dict, tokenizer) -> dict:
    """Apply ``placement`` to copies of the components, render, measure."""
    from inline_primitives._loading import Placement, apply_placement, offload_others
    from inline_primitives._text import TextEncoder

    reset_peak()
    t0 = time.perf_counter()
    modules: dict = {}
    for c in placement.components:
        where = Placement(
            device=DEVICE,
            dtype="bfloat16",
            quantization=c.quantization,
            offload=c.offload,
            tiling=placement.vae_tiling and c.role == "vae",
        )  # fmt: skip
        module = apply_placement(copy.deepcopy(pristine[c.name]), where)
        if c.offload == "model":
            module.register_forward_pre_hook(
                lambda m, _a: offload_others(m, list(modules.values()))
            )
        modules[c.name] = module
    load_s = time.perf_counter() - t0
    load_peak = peak_bytes()
    te = TextEncoder(modules["text_encoder"], tokenizer, "random", DEVICE)
    render(te, modules, 0)  # warm
    reset_peak()
    times = [render(te, modules, 10 + i) for i in range(RUNS)]
    peak = peak_bytes()
    budget = placement.vram_budget_bytes
    return {
        "plan": {
            c.name: {
                "dtype": c.dtype,
                "quantization": c.quantization,
                "offload": c.offload,
                "bytes": c.bytes,
            }
            for c in placement.components
        },
        "park_text_encoder": placement.park_text_encoder,
        "vae_tiling": placement.vae_tiling,
        "planned_peak_gb": round(placement.peak_vram_bytes / GB, 2),
        "load_s": round(load_s, 1),
        "load_peak_vram_gb": round(load_peak / GB, 2),
        "peak_vram_gb": round(peak / GB, 2),
        "within_plan_budget": budget is None or peak <= budget,
        "s_per_image": round(statistics.median(times), 3),
    }


def main() -> None:
    from _tiny import build_tokenizer

    need_gpu()
    started = time.perf_counter()
    pristine = build_cpu()
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = build_tokenizer(Path(tmp) / "tok")
    built_s = time.perf_counter() - started
    results = []
    for budget in BUDGETS_GB:
        placement = plan_for(budget)
        entry: dict = {"budget_gb": budget, "fits": placement.fits, "reason": placement.reason}
        if not placement.fits:
            results.append(entry)
            continue
        entry.update(run_budget(placement, pristine, tokenizer))
        results.append(entry)
        print(json.dumps(entry, indent=2), flush=True)
        gc.collect()
        reset_peak()
    figures = {
        "gpu": gpu_name(),
        "width": SIZE, "height": SIZE, "steps": STEPS, "runs": RUNS,
        "build_s": round(built_s, 1),
        "budgets": results,
    }  # fmt: skip
    write("gpu_memory", figures)


if __name__ == "__main__":
    main()
