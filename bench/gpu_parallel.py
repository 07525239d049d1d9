"""One image split across GPUs: the runtime's worker group vs one GPU (prepared for a machine
with 2 or more GPUs; not run here).

``python bench/gpu_parallel.py [ulysses=2|ring=2|ulysses=2,ring=2]`` on a CUDA machine (nothing
is downloaded): the real Z-Image transformer with random bf16 weights (``gpu_zimage.build``) is
saved as a diffusers component folder, the ``ParallelDenoiser`` starts a torchrun group over the
first GPUs (one rank per GPU on NCCL; the sequence split by diffusers' Ulysses / ring attention,
``runtime._ulysses``, or by xfuser where the primitives pack's ``parallel`` extra is installed),
and 1024x1024, 8 steps is timed against the local loop on GPU 0. Prints and writes
bench/results/gpu_parallel.json: ``speedup`` (one GPU over the group), ``max_abs_diff`` (pixels,
group vs one GPU, same seed), ``split`` (each rank's attention saw 1/N of the tokens) and what
split it (``parallel.splitBy``).
"""

from __future__ import annotations

import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from gpu_zimage import PROMPT, sync, write  # noqa: E402

SIZE, STEPS, RUNS = 1024, 8, 3  # no smoke run: bench/parallel_cpu.py is its CPU twin


def main() -> None:
    import numpy as np
    import torch
    from _tiny import build_tokenizer
    from gpu_zimage import build
    from inline_primitives._text import TextEncoder
    from inline_primitives.runtime import (
        DenoiseRequest,
        LocalDenoiser,
        ParallelDenoiser,
        decode,
        encode_prompts,
        latent_size,
    )
    from inline_primitives.runtime._parallel import degrees
    from inline_sdk import WorkerStats

    gpus = torch.cuda.device_count()
    plan = sys.argv[1] if len(sys.argv) > 1 else f"ulysses={gpus}"
    world = math.prod(degrees(plan).values())
    assert gpus >= max(2, world), f"{plan} needs {world} GPUs, this machine has {gpus}"
    transformer, vae, text_encoder = build("cuda")
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = build_tokenizer(Path(tmp) / "tok")
        folder = Path(tmp) / "transformer"
        transformer.save_pretrained(folder)
        te = TextEncoder(text_encoder, tokenizer, "random", "cuda")
        cond = encode_prompts(te, [PROMPT])
        h, w = latent_size(SIZE, SIZE)

        def req(seed: int) -> DenoiseRequest:
            return DenoiseRequest(positive=cond, negative=None, latent=torch.zeros(1, 16, h, w),
                                  steps=STEPS, guidance=0.0, sampler="euler",
                                  scheduler="simple", seed=seed)  # fmt: skip

        stats = WorkerStats()
        group = ParallelDenoiser(str(folder), plan, [f"cuda:{i}" for i in range(world)], stats)
        local = LocalDenoiser(transformer)
        t0 = time.perf_counter()
        group.denoise(req(0))  # the group starts (once) and warms up
        start_s = time.perf_counter() - t0
        local.denoise(req(0))
        one, split = [], []
        for i in range(RUNS):
            sync()
            t0 = time.perf_counter()
            a = local.denoise(req(10 + i))
            sync()
            one.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            b = group.denoise(req(10 + i))
            split.append(time.perf_counter() - t0)
        pa, pb = decode(vae, a)[0], decode(vae, b.to("cuda"))[0]
        group.close()
    med = statistics.median
    figures = {
        "gpus": [torch.cuda.get_device_name(i) for i in range(world)],
        "plan": plan,
        "speedup": round(med(one) / med(split), 3),
        "denoise_ratio": round(med(one) / med(split), 3),
        "split": bool(group.last.get("split")),
        "max_abs_diff": int(np.abs(pa.astype(int) - pb.astype(int)).max()),
        "one_gpu_s": round(med(one), 4),
        "group_s": round(med(split), 4),
        "group_start_s": round(start_s, 1),
        "parallel": stats.snapshot().get("parallel"),
        "width": SIZE, "height": SIZE, "steps": STEPS, "runs": RUNS, "dtype": "bfloat16",
    }  # fmt: skip
    write("gpu_parallel", figures)


if __name__ == "__main__":
    main()
