"""The GPU scripts in bench/ run here, on the CPU (``--smoke``: the same code with the tiny demo
models), so what a lent GPU machine runs has run before it gets there: the real sampler against
diffusers' pipeline, cross-request batching, the graphed compile, and the memory plans applied
(int8 with model offload, the VAE decoded in tiles through its offload hook)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[2] / "bench"


def smoke(python: Path, name: str, results: Path) -> dict[str, Any]:
    out = subprocess.run(
        [str(python), str(BENCH / f"{name}.py"), "--smoke"],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "INLINE_BENCH_RESULTS": str(results), "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads((results / f"{name}.smoke.json").read_text())


def test_the_sampler_and_diffusers_pipeline_both_render(pack_python, tmp_path):
    figures = smoke(pack_python, "gpu_zimage", tmp_path)
    assert figures["ours_s_per_image"] > 0 and figures["diffusers_s_per_image"] > 0
    assert figures["gpu"] == "cpu (smoke)"


def test_four_requests_denoise_as_one_batch(pack_python, tmp_path):
    figures = smoke(pack_python, "gpu_batching", tmp_path)
    # every timed round (and the warm-up) went through as one batch of the 4 requests
    assert figures["batch_sizes"] == {"4": 3}, figures["batch_sizes"]


def test_the_graphed_compile_warms_up_once_and_does_not_fall_back(pack_python, tmp_path):
    figures = smoke(pack_python, "gpu_compile", tmp_path)
    assert figures["compile"]["mode"] == "GRAPHED" and figures["compile"]["failed"] is None
    assert len(figures["compile"]["warmups"]) == 1  # one shape, compiled once


def test_each_vram_budget_gets_a_plan_that_renders(pack_python, tmp_path):
    figures = smoke(pack_python, "gpu_memory", tmp_path)
    plans = {b["budget_gb"]: b for b in figures["budgets"]}
    assert all(b["fits"] and b["s_per_image"] > 0 for b in plans.values())
    # 8 GB: int8 with model offload (the VAE decoded in tiles); 16 GB: int8, all resident
    assert {c["offload"] for c in plans[8]["plan"].values()} == {"model"}
    assert plans[8]["vae_tiling"] is True
    assert plans[8]["plan"]["diffusion"]["quantization"] == "int8"
    assert {c["offload"] for c in plans[16]["plan"].values()} == {"resident"}


def test_without_a_gpu_or_smoke_a_script_says_so(pack_python):
    out = subprocess.run(
        [str(pack_python), str(BENCH / "gpu_memory.py")], capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert out.returncode != 0 and "needs a CUDA GPU (or --smoke)" in out.stderr
