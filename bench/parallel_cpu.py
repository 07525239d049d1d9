"""One image split across two CPU ranks (a gloo group) against one process, on this machine.

``python bench/parallel_cpu.py [--python PACK_PYTHON]``: the tests' tiny random Z-Image (built
here), one request at 512x512, 8 steps, denoised by the local loop in one process (one torch
thread: one device) and by ``ParallelDenoiser`` with ``ulysses=2`` on two CPU ranks (one thread
each, the Ulysses sequence split), median of 3 each after a warm-up (the group starts once),
the arms interleaved. The denoise
runs in the zimage pack's venv (``--python`` picks one already built). Prints and writes
bench/results/parallel_cpu.json: ``split`` (true when each rank's attention saw half the tokens
of every stage, recorded inside the ranks), ``speedup`` (one process over the group; above 1 is
not required from two shared cores and a tiny model, equality is), ``max_abs_diff`` (the largest
latent difference, fp32; the test's bar is 1e-4) and ``pixel_max_abs_diff`` (of 255).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SIZE, STEPS, RUNS, PLAN = 512, 8, 3, "ulysses=2"


def denoise(root: Path) -> dict:
    """The measurement, in the pack's venv: one JSON line."""
    sys.path.insert(0, str(HERE.parent / "tests" / "models"))
    import torch
    from _batch_probe import load, pixel_diff, requests
    from _probe_ctx import probe_context
    from inline_primitives.runtime import LocalDenoiser, ParallelDenoiser

    # one device each: the process on one core, each rank on one (the analogue of 1 vs 2 GPUs;
    # two threads on two cores shared with other work oversubscribe and measure the contention)
    threads = 1
    torch.set_num_threads(threads)
    os.environ["OMP_NUM_THREADS"] = "1"
    models = load(root, probe_context())
    file = root / "comfy" / "diffusion_models" / "tiny_z_image_turbo.safetensors"
    side = SIZE // 8

    def req() -> object:
        return requests(models, 1, steps=STEPS, side=side)[0]

    local = LocalDenoiser(models["diffusion"])
    group = ParallelDenoiser(str(file), PLAN, ["cpu", "cpu"])
    started = time.perf_counter()
    group.denoise(req())  # the group starts (once) and warms up
    start_s = time.perf_counter() - started
    local.denoise(req())
    one, split = [], []
    for _ in range(RUNS):  # interleaved: the two arms see the same machine
        t0 = time.perf_counter()
        a = local.denoise(req())
        one.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        b = group.denoise(req())
        split.append(time.perf_counter() - t0)
    report = group.last
    group.close()
    return {
        "split": bool(report.get("split")),
        "tokens": report.get("tokens"),
        "one_s": statistics.median(one),
        "group_s": statistics.median(split),
        "group_start_s": start_s,
        "max_abs_diff": float((a - b).abs().max()),
        "pixel_max_abs_diff": pixel_diff(models["vae"], a, b),
        "threads": threads,
    }


def main() -> None:
    from _common import bench_settings, tiny_zimage, write_result, zimage_python

    args = sys.argv[1:]
    python = Path(args[1]) if args[:1] == ["--python"] else zimage_python(bench_settings())
    with tempfile.TemporaryDirectory() as tmp:
        tiny, _ = tiny_zimage(python, Path(tmp))
        out = subprocess.run(
            [str(python), __file__, "--denoise", str(tiny)],
            check=True, capture_output=True, text=True,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "TORCHAO_FORCE_SKIP_LOADING_SO_FILES": "1"},
        )  # fmt: skip
    d = json.loads(out.stdout.strip().splitlines()[-1])
    write_result(
        "parallel_cpu",
        {
            "split": d["split"],
            "speedup": round(d["one_s"] / d["group_s"], 3),
            "max_abs_diff": d["max_abs_diff"],
            "pixel_max_abs_diff": d["pixel_max_abs_diff"],
            "one_process_s": round(d["one_s"], 4),
            "two_ranks_s": round(d["group_s"], 4),
            "group_start_s": round(d["group_start_s"], 1),
            "tokens_per_rank": d["tokens"],
            "one_process_threads": d["threads"],
            "plan": PLAN,
            "backend": "gloo",
            "width": SIZE,
            "height": SIZE,
            "steps": STEPS,
            "runs": RUNS,
            "dtype": "float32",
        },
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--denoise"]:
        print(json.dumps(denoise(Path(sys.argv[2]))))
    else:
        sys.path.insert(0, str(HERE))
        main()
