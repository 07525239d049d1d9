"""Cross-request batching on the tiny random Z-Image (built here, as the tests build it).

``denoise_ratio``: 4 concurrent sample calls at 256x256, 8 steps, each its own seed and prompt,
batched against serial (the runtime library directly, in the pack's venv; target >= 1.25).
``throughput_ratio``: the same 4 requests as whole ``alibaba/z-image-turbo`` runs through host and
worker, decode and PNG included: submitted at once with batching on (INLINE_MAX_BATCH=4) against
one after another with it off (INLINE_MAX_BATCH=1); target >= 1.1. ``max_abs_diff``: the largest
pixel difference (of 255) of a batched image against the same request alone; target <= 1
(``runs_max_abs_diff``: the same for the whole runs' PNGs).
Writes bench/results/batching.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import anyio
from _common import ROOT, bench_settings, median, tiny_zimage, write_result, zimage_python

N, STEPS, SIZE, REPEATS, RUNS = 4, 8, 256, 3, 3
PROMPTS = ["a red fox in snow", "a cat", "a lighthouse at dusk, 35mm film", "a bowl of fruit"]


def graph(i: int, seed: int) -> dict:
    return {
        "graph": {"schemaVersion": 1, "nodes": [
            {"id": "p", "type": "input/text", "params": {"text": PROMPTS[i]}},
            {"id": "z", "type": "alibaba/z-image-turbo", "params": {
                "width": SIZE, "height": SIZE, "steps": STEPS, "seed": seed},
             "inputs": {"prompt": {"from": "p", "output": "text"}}},
        ]},
        "target": "z",
    }  # fmt: skip


async def whole_runs(settings, batch: int) -> tuple[float, list[bytes]]:
    """Median seconds for N runs (at once when batching, else one after another)."""
    from inline_host import Engine

    os.environ["INLINE_MAX_BATCH"] = str(batch)
    os.environ["INLINE_BATCH_WINDOW_MS"] = "200" if batch > 1 else "0"
    times: list[float] = []
    images: list[bytes] = []
    async with Engine.open(settings) as engine:
        for i in range(N):  # warm: worker started, models loaded
            await engine.run(graph(i, 1 + i))
        for r in range(RUNS):
            engine.cache.clear()
            seeds = [1000 * (r + 1) + i for i in range(N)]
            out: list[bytes] = [b""] * N

            async def one(i: int, seeds: list[int] = seeds, out: list[bytes] = out) -> None:
                result = await engine.run(graph(i, seeds[i]))  # a new seed: never a cache hit
                out[i] = engine.read_bytes(result.outputs["image"])

            started = time.perf_counter()
            if batch > 1:
                async with anyio.create_task_group() as tg:
                    for i in range(N):
                        tg.start_soon(one, i)
            else:
                for i in range(N):
                    await one(i)
            times.append(time.perf_counter() - started)
            images = out
    return median(times), images


def main() -> None:
    settings = bench_settings()
    python = zimage_python(settings)
    with tempfile.TemporaryDirectory() as tmp:
        tiny, models = tiny_zimage(python, Path(tmp))
        den = subprocess.run(
            [str(python), str(Path(__file__).parent / "_batching_denoise.py"), str(tiny),
             str(STEPS), str(SIZE), str(REPEATS)],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        d = json.loads(den.stdout.strip().splitlines()[-1])
        s = replace(settings, models_dir=models, max_runs=8)
        serial_s, serial_png = anyio.run(whole_runs, s, 1)
        batched_s, batched_png = anyio.run(whole_runs, s, N)
    sys.path.insert(0, str(ROOT / "tests" / "models"))
    from _png import max_abs_diff

    runs_diff = max(max_abs_diff(a, b) for a, b in zip(serial_png, batched_png, strict=True))
    write_result(
        "batching",
        {
            "denoise_ratio": round(d["serial_s"] / d["batched_s"], 3),
            "throughput_ratio": round(serial_s / batched_s, 3),
            "max_abs_diff": d["max_abs_diff"],
            "denoise_serial_s": round(d["serial_s"], 4),
            "denoise_batched_s": round(d["batched_s"], 4),
            "runs_serial_s": round(serial_s, 4),
            "runs_batched_s": round(batched_s, 4),
            "runs_max_abs_diff": runs_diff,
            "batch_sizes": d["sizes"],
            "targets": {"denoise_ratio": 1.25, "throughput_ratio": 1.1, "max_abs_diff": 1},
            "requests": N,
            "width": SIZE,
            "height": SIZE,
            "steps": STEPS,
        },
    )


if __name__ == "__main__":
    sys.exit(main())
