"""``diffusers/generate`` through host and worker vs a direct ``DiffusionPipeline`` call.

The tiny random Stable Diffusion pipeline the tests build (UNet + CLIP), 128x128, 8 steps with
classifier-free guidance, warm, median of RUNS renders each, interleaved (a new seed per render,
so the output cache never answers). Writes bench/results/diffusers_overhead.json with
``ratio_vs_diffusers`` (target <= 1.05).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import anyio
from _common import ROOT, bench_settings, median, write_result

RUNS = 7
STEPS = 8
SIZE = 128
GUIDANCE = 5.0
MODEL = "tiny-sd"


def pack_python(settings) -> Path:
    from inline_registry import load_registry, prepare_env

    registry = load_registry(settings.packs_dir)
    return prepare_env(registry.packs["diffusers"].env).python


async def interleaved(settings, baseline: subprocess.Popen[str], runs: int) -> tuple[list, list]:
    """Our render and the direct pipeline's, alternately (this machine's load hits both alike)."""
    from inline_host import Engine

    def doc(seed: int) -> dict:
        return {
            "graph": {"schemaVersion": 1, "nodes": [
                {"id": "p", "type": "input/text", "params": {"text": "a red fox in snow"}},
                {"id": "g", "type": "diffusers/generate", "params": {
                    "model": MODEL, "width": SIZE, "height": SIZE, "steps": STEPS,
                    "guidance": GUIDANCE, "seed": seed},
                 "inputs": {"prompt": {"from": "p", "output": "text"}}},
            ]},
            "target": "g",
        }  # fmt: skip

    assert baseline.stdin is not None and baseline.stdout is not None
    ours: list[float] = []
    theirs: list[float] = []
    async with Engine.open(settings) as engine:
        for seed in range(2):  # warm: the worker started, the pipeline loaded
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
    python = pack_python(settings)
    with tempfile.TemporaryDirectory() as tmp:
        tiny = Path(tmp) / "tiny"
        subprocess.run(
            [str(python), str(ROOT / "tests" / "generate" / "_tiny_pipes.py"), str(tiny)],
            check=True, capture_output=True,
        )  # fmt: skip
        baseline = subprocess.Popen(
            [str(python), str(Path(__file__).parent / "_diffusers_direct.py"),
             str(tiny / "diffusers" / MODEL), str(STEPS), str(SIZE), str(GUIDANCE)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert baseline.stdout is not None
            assert baseline.stdout.readline().strip() == "ready"
            samples, direct = anyio.run(
                interleaved, replace(settings, models_dir=tiny), baseline, RUNS
            )
        finally:
            baseline.kill()
            baseline.wait()
    ours_s = median(samples)
    baseline_s = median(direct)
    write_result(
        "diffusers_overhead",
        {
            "ours_s": round(ours_s, 4),
            "diffusers_s": round(baseline_s, 4),
            "overhead_ms": round((ours_s - baseline_s) * 1000, 2),
            "ratio_vs_diffusers": round(ours_s / baseline_s, 3),
            "target": 1.05,
            "model": f"{MODEL} (StableDiffusionPipeline, random weights)",
            "width": SIZE,
            "height": SIZE,
            "steps": STEPS,
            "guidance": GUIDANCE,
            "runs": RUNS,
        },
    )


if __name__ == "__main__":
    sys.exit(main())
