"""Cold start: a first tiny Z-Image render with ``inline run`` against a plain diffusers script.

Both are fresh processes in the same environment (the zimage pack venv's interpreter for the
script; the environment variables as given, ``PYTHONDONTWRITEBYTECODE`` included), rendering
the same tiny random weights (tests/models/_tiny.py): ``inline run`` from the ComfyUI
single-file layout in ``models/``, the script from the same weights' diffusers folder. Each
side's wall time covers everything: interpreter start, imports, loading, one render, one PNG.
The venvs are built first (not timed). Runs alternate, with new seeds (no take is reused), and
the figures are medians. Writes ``bench/results/cold_start.json``: ``inline_s``, ``plain_s``,
``ratio`` (target <= 1.3), and where the time goes: ``worker_imports_s`` (torch, diffusers and
transformers imported in the byte-compiled pack venv), ``host_registry_s`` (``inline nodes``: the
host's start and registry load, no worker) and ``venv_pyc_files``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, bench_settings, median, tiny_zimage, write_result

RUNS = 3
STEPS = 2
SIZE = 256
PROMPT = "a red fox in snow"
TARGET = 1.3

PLAIN = """
import sys
import torch
from diffusers import ZImagePipeline

folder, size, steps, seed, out, prompt = sys.argv[1:]
pipe = ZImagePipeline.from_pretrained(folder, local_files_only=True)
pipe.set_progress_bar_config(disable=True)
image = pipe(
    prompt=prompt, height=int(size), width=int(size), num_inference_steps=int(steps),
    guidance_scale=0.0, generator=torch.Generator("cpu").manual_seed(int(seed)),
).images[0]
image.save(out)
"""


def graph(seed: int) -> dict:
    return {
        "graph": {"schemaVersion": 1, "nodes": [
            {"id": "p", "type": "input/text", "params": {"text": PROMPT}},
            {"id": "z", "type": "alibaba/z-image-turbo", "params": {
                "width": SIZE, "height": SIZE, "steps": STEPS, "seed": seed},
             "inputs": {"prompt": {"from": "p", "output": "text"}}},
        ]},
        "target": "z",
    }  # fmt: skip


def timed(command: list[str], env: dict[str, str], cwd: Path) -> float:
    started = time.perf_counter()
    proc = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    took = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{command[:3]} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return took


def main() -> None:
    from inline_registry import load_registry

    settings = bench_settings()
    registry = load_registry(settings.packs_dir, build=True)  # venvs built: not part of the start
    python = registry.packs["zimage"].env.python
    inline = ROOT / ".venv" / "bin" / "inline"
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        tiny, models = tiny_zimage(python, tmp)
        env = {
            **os.environ,
            "INLINE_DATA_DIR": str(settings.data_dir),
            "INLINE_MODELS_DIR": str(models),
            "HF_HUB_OFFLINE": "1",
        }
        env.pop("INLINE_PACK_PATHS", None)
        ours: list[float] = []
        plain: list[float] = []
        for i in range(RUNS + 1):  # the first pair warms the OS page cache for both alike
            seed = int(time.time()) * 10 + i
            doc = tmp / f"g{i}.json"
            doc.write_text(json.dumps(graph(seed)))
            a = timed([str(inline), "run", str(doc), "--out", str(tmp / f"o{i}")], env, tmp)
            b = timed(
                [str(python), "-c", PLAIN, str(tiny / "diffusers"), str(SIZE), str(STEPS),
                 str(seed), str(tmp / f"plain{i}.png"), PROMPT],
                env, tmp,
            )  # fmt: skip
            print(f"run {i}: inline {a:.2f} s, plain {b:.2f} s", file=sys.stderr)
            if i:
                ours.append(a)
                plain.append(b)
        # where a cold start goes: the worker's imports, and the host's own start
        imports = [
            timed([str(python), "-c", "import torch, diffusers, transformers"], env, tmp)
            for _ in range(RUNS)
        ]
        host = [timed([str(inline), "nodes", "--json"], env, tmp) for _ in range(RUNS)]
        pycs = sum(1 for _ in python.parent.parent.glob("lib/python3*/site-packages/**/*.pyc"))
    inline_s, plain_s = median(ours), median(plain)
    write_result(
        "cold_start",
        {
            "inline_s": round(inline_s, 3),
            "plain_s": round(plain_s, 3),
            "ratio": round(inline_s / plain_s, 3),
            "target": TARGET,
            "runs": RUNS,
            "steps": STEPS,
            "width": SIZE,
            "height": SIZE,
            "pythondontwritebytecode": os.environ.get("PYTHONDONTWRITEBYTECODE", ""),
            "worker_imports_s": round(median(imports), 3),
            "host_registry_s": round(median(host), 3),
            "venv_pyc_files": pycs,
        },
    )


if __name__ == "__main__":
    sys.exit(main())
