"""Fixtures: the pack venvs (diffusers, mesh and a test Image2Mesh pack) and the tiny pipelines
with diffusers' own renders, built once per session (``tests/_builds.py``), and one engine per
module."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from inline_host import Engine, Settings

from .._builds import built_once, data_dir_over, run_builder, shared_packs

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
    """A data dir over the session's pack venvs, these packs' built."""
    shared_packs(tmp_path_factory, ("basics", "diffusers", "mesh", "meshpack"), (MESHPACK,))
    return data_dir_over(tmp_path_factory, "inline-generate-data")


@pytest.fixture(scope="session")
def diffusers_python(gen_data_dir: Path) -> Path:
    return next((gen_data_dir / "packs" / "diffusers").glob("*/venv/bin/python"))


@pytest.fixture(scope="session")
def pipes(tmp_path_factory: pytest.TempPathFactory, diffusers_python: Path) -> TinyPipes:
    root = built_once(
        tmp_path_factory,
        "tiny-pipes",
        lambda out: run_builder(diffusers_python, HERE / "_tiny_pipes.py", out),
    )
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
            "INLINE_SANDBOX_READ": os.environ.get("INLINE_SANDBOX_READ", ""),
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
