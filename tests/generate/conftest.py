"""Fixtures: the pack venvs (diffusers, mesh and a test Image2Mesh pack) built once, the tiny
pipelines and diffusers' own renders built once, and one engine per module."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from inline_host import Engine, Settings

from ..conftest import build_packs

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MESHPACK = ROOT / "tests" / "packs" / "meshpack"


@dataclass(frozen=True)
class TinyPipes:
    """The tiny pipelines (``diffusers/<name>``), the init image and the reference renders."""

    root: Path
    python: Path

    def reference(self, name: str) -> bytes:
        return (self.root / "reference" / f"{name}.png").read_bytes()

    def case(self, name: str) -> dict[str, Any]:
        cases = json.loads((self.root / "cases.json").read_text())
        return next(c for c in cases if c["name"] == name)


@pytest.fixture(scope="session")
def gen_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("inline-generate-data")
    build_packs(path / "packs", ("basics", "diffusers", "mesh", "meshpack"), (MESHPACK,))
    return path


@pytest.fixture(scope="session")
def diffusers_python(gen_data_dir: Path) -> Path:
    return next((gen_data_dir / "packs" / "diffusers").glob("*/venv/bin/python"))


@pytest.fixture(scope="session")
def pipes(tmp_path_factory: pytest.TempPathFactory, diffusers_python: Path) -> TinyPipes:
    root = tmp_path_factory.mktemp("tiny-pipes")
    proc = subprocess.run(
        [str(diffusers_python), str(HERE / "_tiny_pipes.py"), str(root)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return TinyPipes(root, diffusers_python)


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def module_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("generate-module")


@pytest.fixture(scope="module")
def settings(gen_data_dir: Path, module_dir: Path, pipes: TinyPipes) -> Settings:
    inputs = module_dir / "inputs"
    inputs.mkdir(exist_ok=True)
    shutil.copy(pipes.root / "init.png", inputs / "init.png")
    models = module_dir / "models"
    shutil.copytree(pipes.root / "diffusers", models / "diffusers", dirs_exist_ok=True)
    base = Settings.from_env(
        {
            "INLINE_DATA_DIR": str(gen_data_dir),
            "INLINE_MODELS_DIR": str(models),
            "INLINE_INPUT_ROOTS": str(inputs),
        }
    )
    return replace(base, extra_packs=(MESHPACK,), cancel_grace=30.0)


@pytest.fixture(scope="module")
async def engine(settings: Settings) -> AsyncIterator[Engine]:
    async with Engine.open(settings) as eng:
        yield eng
