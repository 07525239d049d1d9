"""``alibaba/z-image-turbo`` through host and worker vs a direct ``ZImagePipeline`` call.

Same tiny random model (built here, as the tests build it), 256x256, 4 steps, warm, median of
RUNS renders each (a new seed per render, so the output cache never answers). Writes
bench/results/zimage_overhead.json with ``ratio_vs_diffusers`` (target <= 1.05).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import anyio
from _common import bench_settings, median, tiny_zimage, write_result, zimage_python

RUNS = 31
STEPS = 4
SIZE = 256


async def interleaved(settings, baseline: subprocess.Popen[str], runs: int) -> tuple[list, list]:
    """Our render and the direct pipeline's, alternately (this machine's load hits both alike)."""
    from inline_host import Engine

    def doc(seed: int) -> dict:
        return {
            "graph": {"schemaVersion": 1, "nodes": [
                {"id": "p", "type": "input/text", "params": {"text": "a red fox in snow"}},
                {"id": "z", "type": "alibaba/z-image-turbo", "params": {
                    "width": SIZE, "height": SIZE, "steps": STEPS, "seed": seed},
                 "inputs": {"prompt": {"from": "p", "output": "text"}}},
            ]},
            "target": "z",
        }  # fmt: skip

    assert baseline.stdin is not None and baseline.stdout is not None
    ours: list[float] = []
    theirs: list[float] = []
    async with Engine.open(settings) as engine:
        for seed in range(2):  # warm: workers started, models loaded
            await engine.run(doc(seed))
        for i in range(runs):
            started = time.perf_counter()
            result = await engine.run(doc(100 + i))
            engine.read_bytes(result.outputs["image"])
            ours.append(time.perf_counter() - started)
            baseline.stdin.write(f"{100 + i}\n")
            baseline.stdin.flush()
            theirs.append(float(baseline.stdout.readline()))
    return ours, theirs


def main() -> None:
    settings = bench_settings()
    python = zimage_python(settings)
    with tempfile.TemporaryDirectory() as tmp:
        tiny, models = tiny_zimage(python, Path(tmp))
        baseline = subprocess.Popen(
            [str(python), str(Path(__file__).parent / "_zimage_direct.py"), str(tiny / "diffusers"),
             str(STEPS), str(SIZE)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert baseline.stdout is not None
            assert baseline.stdout.readline().strip() == "ready"
            samples, direct = anyio.run(
                interleaved, replace(settings, models_dir=models), baseline, RUNS
            )
        finally:
            baseline.kill()
            baseline.wait()
    ours_s = median(samples)
    baseline_s = median(direct)
    write_result(
        "zimage_overhead",
        {
            "ours_s": round(ours_s, 4),
            "diffusers_s": round(baseline_s, 4),
            "overhead_ms": round((ours_s - baseline_s) * 1000, 2),
            "ratio_vs_diffusers": round(ours_s / baseline_s, 3),
            "target": 1.05,
            "width": SIZE,
            "height": SIZE,
            "steps": STEPS,
            "runs": RUNS,
        },
    )


if __name__ == "__main__":
    sys.exit(main())
