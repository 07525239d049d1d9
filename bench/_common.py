"""Shared by the benchmarks: an engine over the bench packs, and the JSON result file."""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
BENCH_PACKS = (HERE / "packs" / "benchpack", HERE / "packs" / "benchsink")


def bench_settings() -> Any:
    """Host settings with the bench packs registered (data under .inline/ unless overridden)."""
    from inline_host import Settings

    env = dict(os.environ)
    env.setdefault("INLINE_DATA_DIR", str(ROOT / ".inline"))
    return replace(Settings.from_env(env), extra_packs=BENCH_PACKS)


def zimage_python(settings: Any) -> Path:
    """The zimage pack's Python (its venv built first if it is not yet)."""
    from inline_registry import load_registry, prepare_env

    return prepare_env(load_registry(settings.packs_dir).packs["zimage"].env).python


def tiny_zimage(python: Path, folder: Path) -> tuple[Path, Path]:
    """The tests' tiny random Z-Image, built under ``folder`` by the zimage pack's ``python``:
    (the build's root, a models dir holding it in the ComfyUI layout)."""
    import shutil
    import subprocess

    tiny = folder / "tiny"
    subprocess.run(
        [str(python), str(ROOT / "tests" / "models" / "_tiny.py"), str(tiny)],
        check=True, capture_output=True,
    )  # fmt: skip
    models = folder / "models"
    shutil.copytree(tiny / "comfy", models)
    return tiny, models


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def write_result(name: str, figures: dict[str, Any]) -> Path:
    """Print the figures and write ``bench/results/<name>.json`` (atomically; the folder
    ``INLINE_BENCH_RESULTS`` names instead, where set)."""
    figures = {
        **figures,
        "machine": {
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
    }
    folder = Path(os.environ.get("INLINE_BENCH_RESULTS") or RESULTS)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(figures, indent=2) + "\n")
    tmp.replace(path)
    for key, value in figures.items():
        if key != "machine":
            print(f"{key:>24}: {value}")
    print(f"wrote {path}")
    return path
