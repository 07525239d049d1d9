"""Compile on one GPU: steps/s eager vs GRAPHED (``reduce-overhead``, a CUDA graph per shape) at
1024x1024 (prepared for a lent GPU machine; not run here).

``python bench/gpu_compile.py`` on a CUDA machine (nothing is downloaded): the real Z-Image
architecture with random bf16 weights (``gpu_zimage.build``), 8 steps. Prints and writes
bench/results/gpu_compile.json: ``eager_steps_per_s``, ``graphed_steps_per_s``, the warm-up,
``denoise_ratio`` (graphed over eager), ``throughput_ratio`` (with decode and PNG) and
``max_abs_diff`` (pixels, graphed vs eager, same seed).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from gpu_zimage import DEVICE, PROMPT, gpu_name, need_gpu, scaled, sync, write  # noqa: E402

SIZE, STEPS, RUNS = scaled(1024, 8, 5)


def main() -> None:
    import numpy as np
    import torch
    from _tiny import build_tokenizer
    from gpu_zimage import build
    from inline_primitives._text import TextEncoder
    from inline_primitives.runtime import (
        CompiledTransformer,
        DenoiseRequest,
        LocalDenoiser,
        decode,
        encode_png,
        encode_prompts,
        latent_size,
    )
    from inline_sdk import WorkerStats

    need_gpu()
    transformer, vae, text_encoder = build(DEVICE)
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = build_tokenizer(Path(tmp) / "tok")
    te = TextEncoder(text_encoder, tokenizer, "random", DEVICE)
    cond = encode_prompts(te, [PROMPT])
    h, w = latent_size(SIZE, SIZE)
    stats = WorkerStats()
    eager = LocalDenoiser(transformer)
    graphed = LocalDenoiser(CompiledTransformer(transformer, "graphed", stats))

    def req(seed: int) -> DenoiseRequest:
        return DenoiseRequest(positive=cond, negative=None, latent=torch.zeros(1, 16, h, w),
                              steps=STEPS, guidance=0.0, sampler="euler", scheduler="simple",
                              seed=seed)  # fmt: skip

    def timed(den, seed: int, whole: bool) -> tuple[float, object]:
        sync()
        t0 = time.perf_counter()
        x = den.denoise(req(seed))
        if whole:
            encode_png(decode(vae, x)[0])
        sync()
        return time.perf_counter() - t0, x

    t0 = time.perf_counter()
    timed(graphed, 0, False)  # the warm-up: compile and capture
    warmup = time.perf_counter() - t0
    timed(eager, 0, False)
    e, g, ew, gw = [], [], [], []
    for i in range(RUNS):
        e.append(timed(eager, 10 + i, False)[0])
        g.append(timed(graphed, 10 + i, False)[0])
        ew.append(timed(eager, 10 + i, True)[0])
        gw.append(timed(graphed, 10 + i, True)[0])
    a, b = eager.denoise(req(99)), graphed.denoise(req(99))
    pa, pb = decode(vae, a)[0], decode(vae, b)[0]
    med = statistics.median
    figures = {
        "gpu": gpu_name(),
        "eager_steps_per_s": round(STEPS / med(e), 3),
        "graphed_steps_per_s": round(STEPS / med(g), 3),
        "denoise_ratio": round(med(e) / med(g), 3),
        "throughput_ratio": round(med(ew) / med(gw), 3),
        "max_abs_diff": int(np.abs(pa.astype(int) - pb.astype(int)).max()),
        "warmup_s": round(warmup, 1),
        "compile": stats.snapshot().get("compile"),
        "width": SIZE, "height": SIZE, "steps": STEPS, "runs": RUNS, "dtype": "bfloat16",
    }  # fmt: skip
    write("gpu_compile", figures)


if __name__ == "__main__":
    main()
