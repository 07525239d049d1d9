"""End-to-end fixtures: real pack venvs (built once per session) and engines over them."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from inline_host import Settings
from inline_registry import load_registry

ROOT = Path(__file__).resolve().parents[2]
TEST_PACKS = (ROOT / "tests" / "packs" / "testpack", ROOT / "tests" / "packs" / "otherpack")


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One data dir per session, its pack venvs built once."""
    path = tmp_path_factory.mktemp("inline-data")
    load_registry(path / "packs", TEST_PACKS)
    return path


@pytest.fixture(params=["local", "tcp"])
def settings(data_dir: Path, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Settings]:
    """Settings over the session's venvs, with this test's own inputs and models dirs; every
    engine test runs once per launcher: a local socketpair worker, and a worker that dials back
    over TCP and shares no memory with the host (bulk bytes in chunks)."""
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    base = Settings.from_env(
        {
            "INLINE_SANDBOX_READ": os.environ.get("INLINE_SANDBOX_READ", ""),
            "INLINE_DATA_DIR": str(data_dir),
            "INLINE_MODELS_DIR": str(tmp_path / "models"),
            "INLINE_INPUT_ROOTS": str(inputs),
        }
    )
    yield replace(base, extra_packs=TEST_PACKS, launcher=request.param)


@pytest.fixture
def cli_env(data_dir: Path, tmp_path: Path) -> dict[str, str]:
    """Environment for running the ``inline`` command in a subprocess."""
    env = dict(os.environ)
    env.update(
        {
            "INLINE_DATA_DIR": str(data_dir),
            "INLINE_MODELS_DIR": str(tmp_path / "models"),
            "INLINE_INPUT_ROOTS": os.pathsep.join([str(tmp_path), str(ROOT / "examples")]),
            "INLINE_PACK_PATHS": os.pathsep.join(str(p) for p in TEST_PACKS),
        }
    )
    return env


def inline_exe() -> str:
    exe = ROOT / ".venv" / "bin" / "inline"
    return str(exe) if exe.exists() else (shutil.which("inline") or "inline")
