"""Cross-request batching at full size on one GPU (prepared for a lent GPU machine; not run here).

``python bench/gpu_batching.py`` on a CUDA machine with the pack's libraries installed (nothing is
downloaded): the real Z-Image architecture with random bf16 weights (``gpu_zimage.build``), 4
requests at 512x512, 8 steps, each its own seed and prompt. ``denoise_ratio``: the runtime's
``BatchedDenoiser`` (one batch of 4) against the local loop run 4 times (target >= 1.7);
``throughput_ratio``: the same with encode, decode (batched too) and PNG; ``max_abs_diff``: the
largest pixel difference of a batched image against the same request alone. Writes
bench/results/gpu_batching.json.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from gpu_zimage import DEVICE, gpu_name, need_gpu, peak_gb, scaled, sync, write  # noqa: E402

N = 4
SIZE, STEPS, RUNS = scaled(512, 8, 3)
PROMPTS = ["a red fox in snow", "a cat on a mat", "a lighthouse at dusk", "a bowl of fruit"]


def main() -> None:
    import numpy as np
    import torch
    from _tiny import build_tokenizer
    from gpu_zimage import build
    from inline_primitives._text import TextEncoder
    from inline_primitives.runtime import (
        BatchedDenoiser,
        DenoiseRequest,
        Gatherer,
        LocalDenoiser,
        decode,
        encode_png,
        encode_prompts,
        latent_size,
    )

    need_gpu()
    transformer, vae, text_encoder = build(DEVICE)
    transformer._inline_device = DEVICE
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = build_tokenizer(Path(tmp) / "tok")
    te = TextEncoder(text_encoder, tokenizer, "random", DEVICE)
    h, w = latent_size(SIZE, SIZE)
    local = LocalDenoiser(transformer)
    batched = BatchedDenoiser(transformer, limit=N, window_s=60.0)
    decoder = Gatherer(
        lambda jobs: [j.succeed([img]) for j, img in
                      zip(jobs, decode(vae, torch.cat([j.request for j in jobs])), strict=True)],
        lambda x: decode(vae, x), key=lambda x: tuple(x.shape), limit=lambda _x: N,
        window_s=60.0,
    )  # fmt: skip

    def reqs(base: int, conds) -> list:
        return [DenoiseRequest(positive=conds[i], negative=None, latent=torch.zeros(1, 16, h, w),
                               steps=STEPS, guidance=0.0, sampler="euler", scheduler="simple",
                               seed=base + i) for i in range(N)]  # fmt: skip

    def threads(fn) -> list:
        out: list = [None] * N
        ts = [threading.Thread(target=lambda i=i: out.__setitem__(i, fn(i))) for i in range(N)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return out

    def timed(fn):
        sync()
        t0 = time.perf_counter()
        out = fn()
        sync()
        return time.perf_counter() - t0, out

    conds = [encode_prompts(te, [p]) for p in PROMPTS]
    local.denoise(reqs(0, conds)[0])
    threads(lambda i: batched.denoise(reqs(0, conds)[i]))
    d_serial, d_batched, r_serial, r_batched, diff = [], [], [], [], 0
    for r in range(RUNS):
        t, alone = timed(lambda r=r: [local.denoise(q) for q in reqs(10 * r, conds)])
        d_serial.append(t)
        t, together = timed(lambda r=r: threads(lambda i: batched.denoise(reqs(10 * r, conds)[i])))
        d_batched.append(t)
        for a, b in zip(alone, together, strict=True):
            pa, pb = decode(vae, a)[0], decode(vae, b)[0]
            diff = max(diff, int(np.abs(pa.astype(int) - pb.astype(int)).max()))

        def whole_serial(r: int = r) -> None:
            for i in range(N):
                c = encode_prompts(te, [PROMPTS[i]])
                x = local.denoise(reqs(100 * r, [c] * N)[i])
                encode_png(decode(vae, x)[0])

        def whole_batched(r: int = r) -> None:
            def one(i: int) -> None:
                c = encode_prompts(te, [PROMPTS[i]])
                x = batched.denoise(reqs(100 * r, [c] * N)[i])
                encode_png(decoder.submit(x)[0])

            threads(one)

        r_serial.append(timed(whole_serial)[0])
        r_batched.append(timed(whole_batched)[0])
    med = statistics.median
    figures = {
        "gpu": gpu_name(),
        "denoise_ratio": round(med(d_serial) / med(d_batched), 3),
        "throughput_ratio": round(med(r_serial) / med(r_batched), 3),
        "max_abs_diff": diff,
        "denoise_serial_s": round(med(d_serial), 4), "denoise_batched_s": round(med(d_batched), 4),
        "runs_serial_s": round(med(r_serial), 4), "runs_batched_s": round(med(r_batched), 4),
        "batch_sizes": batched.gatherer.stats.sizes,
        "targets": {"denoise_ratio": 1.7, "max_abs_diff": 1},
        "requests": N, "width": SIZE, "height": SIZE, "steps": STEPS, "dtype": "bfloat16",
        "peak_vram_gb": peak_gb(),
    }  # fmt: skip
    write("gpu_batching", figures)


if __name__ == "__main__":
    main()
