"""Shared fixtures: the anyio backend, a guard that records any attempt to import torch, and the
markers of the suite's tiers (``torch``, ``ray``, ``slow``), given by where a test lives."""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

HEAVY = ("torch", "diffusers", "transformers")
#: Where the tests that build a torch pack venv (and tiny models) live, file or folder.
TORCH_TESTS = (
    "tests/models/",
    "tests/generate/",
    "tests/text/test_client.py",
    "tests/text/test_openai.py",
    "tests/chaos/test_lora_hostile.py",
    "tests/chaos/test_first_use.py",
)
#: Where the tests that start Ray clusters live.
RAY_TESTS = ("tests/ray/",)
#: Other tests that take minutes (two minutes of schemathesis).
SLOW_TESTS = ("tests/api/test_fuzz.py",)
ROOT = Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test by where it lives: ``torch`` (builds a torch venv), ``ray`` (starts a
    cluster); both are ``slow``, as are a few others that take minutes. ``./scripts/test -m
    "not slow"`` is the fast tier."""
    for item in items:
        where = Path(str(item.fspath)).resolve().relative_to(ROOT).as_posix()
        if where.startswith(TORCH_TESTS):
            item.add_marker(pytest.mark.torch)
            item.add_marker(pytest.mark.slow)
        if where.startswith(RAY_TESTS):
            item.add_marker(pytest.mark.ray)
            item.add_marker(pytest.mark.slow)
        if where.startswith(SLOW_TESTS):
            item.add_marker(pytest.mark.slow)


class HeavyImportRecorder(importlib.abc.MetaPathFinder):
    """Records every attempt to import torch & co in this process (even ones that would fail)."""

    def __init__(self) -> None:
        self.attempts: list[str] = []

    def find_spec(self, fullname, path, target=None):  # type: ignore[no-untyped-def]
        if fullname.split(".")[0] in HEAVY:
            self.attempts.append(fullname)
        return None


RECORDER = HeavyImportRecorder()
sys.meta_path.insert(0, RECORDER)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def heavy_imports() -> HeavyImportRecorder:
    return RECORDER


def build_packs(packs_dir: Path, names: Sequence[str], extra: Sequence[Path] = ()) -> Any:
    """The registry over ``packs_dir`` with the venvs of the packs ``names`` built (the others
    stay lazy: a run builds what it needs, so tests build only what they use)."""
    from inline_registry import load_registry, prepare_env

    registry = load_registry(packs_dir, tuple(extra))
    assert not registry.failed, registry.failed
    for name in names:
        prepare_env(registry.packs[name].env)
    return load_registry(packs_dir, tuple(extra))
