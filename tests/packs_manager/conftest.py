"""A data dir per test, no first-party packs (nothing heavy is built), the repo's constraints."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from inline_registry import PackManager, Step

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def steps() -> list[Step]:
    return []


@pytest.fixture
def no_builtin(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    empty = tmp_path_factory.mktemp("no-builtin-packs")
    monkeypatch.setenv("INLINE_BUILTIN_PACKS", str(empty))
    monkeypatch.delenv("INLINE_PACK_PATHS", raising=False)
    monkeypatch.setenv("INLINE_CONSTRAINTS", str(ROOT / "constraints" / "platform.txt"))
    return empty


@pytest.fixture
def data_dir(tmp_path: Path, no_builtin: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "data"
    monkeypatch.setenv("INLINE_DATA_DIR", str(path))
    yield path


@pytest.fixture
def manager(data_dir: Path, steps: list[Step]) -> PackManager:
    return PackManager(data_dir, progress=steps.append, handshake_timeout=60)
