"""Shared fixtures: the anyio backend, and a guard that records any attempt to import torch."""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

HEAVY = ("torch", "diffusers", "transformers")


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
