"""The denoise half of bench/batching.py, run in the zimage pack's venv:
``python _batching_denoise.py TINY_ROOT STEPS SIZE REPEATS``. Four requests, each its own seed
and prompt: serial (one after another, the local loop) vs batched (four threads, one batch),
median of REPEATS each, interleaved, each arm on worker threads as in a pack worker; then the
max pixel difference of each batched image against the same request alone. Prints one JSON
line."""

from __future__ import annotations

import json
import statistics
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "models"))

N = 4


def in_thread(fn):
    """``fn()`` on a thread of its own, as a worker runs every call (and as the batched arm
    runs): torch's intra-op threading differs on the main thread."""
    box: list = []
    thread = threading.Thread(target=lambda: box.append(fn()))
    thread.start()
    thread.join()
    return box[0]


def main() -> None:
    import torch
    from _batch_probe import PROMPTS, concurrently, load, pixel_diff
    from _probe_ctx import probe_context
    from inline_primitives.runtime import (
        BatchedDenoiser,
        DenoiseRequest,
        LocalDenoiser,
        encode_prompts,
        latent_size,
    )

    root, steps, size, repeats = (
        Path(sys.argv[1]),
        int(sys.argv[2]),
        int(sys.argv[3]),
        int(sys.argv[4]),
    )
    models = load(root, probe_context())
    h, w = latent_size(size, size)
    conds = [encode_prompts(models["text_encoder"], [p]) for p in PROMPTS[:N]]

    def reqs(base: int) -> list[DenoiseRequest]:
        return [
            DenoiseRequest(positive=conds[i], negative=None, latent=torch.zeros(1, 16, h, w),
                           steps=steps, guidance=0.0, sampler="euler", scheduler="simple",
                           seed=base + i)
            for i in range(N)
        ]  # fmt: skip

    local = LocalDenoiser(models["diffusion"])
    batched = BatchedDenoiser(models["diffusion"], limit=N, window_s=60.0)
    in_thread(lambda: local.denoise(reqs(0)[0]))  # warm
    concurrently(batched, reqs(0))
    serial_s, batched_s = [], []
    for r in range(repeats):
        started = time.perf_counter()
        alone = in_thread(lambda r=r: [local.denoise(q) for q in reqs(10 * r)])
        serial_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        together = concurrently(batched, reqs(10 * r))
        batched_s.append(time.perf_counter() - started)
    diff = max(pixel_diff(models["vae"], a, b) for a, b in zip(alone, together, strict=True))
    print(json.dumps({
        "serial_s": statistics.median(serial_s), "batched_s": statistics.median(batched_s),
        "max_abs_diff": diff, "sizes": batched.gatherer.stats.sizes,
    }))  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
