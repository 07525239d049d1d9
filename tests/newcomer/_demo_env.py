"""What the demo-model and examples tests share: the session's pack venvs (every first-party
pack), and ``inline demo models`` run once per session (``tests/_builds.py``) into a models dir
every test folder that wants the demo models reuses."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from .._builds import QUIET, built_once, data_dir_over, shared_packs

ROOT = Path(__file__).resolve().parents[2]
INLINE = ROOT / ".venv" / "bin" / "inline"
#: Every first-party pack the examples use.
PACKS = ("basics", "text", "primitives", "zimage", "diffusers", "mesh", "hosted")


@dataclass(frozen=True)
class DemoModels:
    """A models dir that ``inline demo models`` filled, and what the command printed."""

    models: Path
    stderr: str
    seconds: float


def demo_env(data_dir: Path, models: Path) -> dict[str, str]:
    """The environment of an ``inline`` command over ``data_dir`` and ``models``."""
    return {**os.environ, **QUIET, "INLINE_DATA_DIR": str(data_dir),
            "INLINE_MODELS_DIR": str(models)}  # fmt: skip


def run_inline(
    data_dir: Path, models: Path, *args: str, timeout: float = 1800
) -> subprocess.CompletedProcess[str]:
    """``inline ARGS`` over ``data_dir`` and ``models``."""
    return subprocess.run([str(INLINE), *args], capture_output=True, text=True,
                          env=demo_env(data_dir, models), timeout=timeout)  # fmt: skip


@pytest.fixture(scope="session")
def demo_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data dir over the session's shared pack venvs, every first-party pack built."""
    registry = shared_packs(tmp_path_factory, PACKS)
    assert not registry.failed, registry.failed
    return data_dir_over(tmp_path_factory, "demo-data")


def _build(data_dir: Path, out: Path) -> None:
    started = time.monotonic()
    proc = run_inline(data_dir, out / "models", "demo", "models")
    (out / "stderr.txt").write_text(proc.stderr)
    (out / "seconds.txt").write_text(f"{time.monotonic() - started:.1f}")
    assert proc.returncode == 0, proc.stderr[-4000:]


@pytest.fixture(scope="session")
def demo_models(tmp_path_factory: pytest.TempPathFactory, demo_data: Path) -> DemoModels:
    """``inline demo models`` (every family), run once per session."""
    out = built_once(tmp_path_factory, "demo-models", lambda out: _build(demo_data, out))
    return DemoModels(out / "models", (out / "stderr.txt").read_text(),
                      float((out / "seconds.txt").read_text()))  # fmt: skip


def copy_models(demo: DemoModels, dest: Path) -> Path:
    """A copy of the demo models dir at ``dest`` (a server of one's own may write there)."""
    shutil.copytree(demo.models, dest, dirs_exist_ok=True)
    return dest
