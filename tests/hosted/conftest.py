"""The hosted pack's venv (built once per session, beside basics: ``tests/_builds.py``), the fake
upstreams."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from .._builds import data_dir_over, shared_packs
from ._fakes import FakeUpstream

ROOT = Path(__file__).resolve().parents[2]
#: A tiny real PNG (1x1), what the fake Gemini returns as its picture.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360f8cf000003010101a6b1d5500000000049454e44ae426082"
)


@pytest.fixture(scope="session")
def builtin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A first-party packs folder holding only basics and hosted (no torch venvs to build)."""
    path = tmp_path_factory.mktemp("hosted-builtin")
    for name in ("basics", "hosted"):
        (path / name).symlink_to(ROOT / "packs" / name, target_is_directory=True)
    return path


@pytest.fixture(scope="session")
def hosted_data(tmp_path_factory: pytest.TempPathFactory, builtin_dir: Path) -> Path:
    """A data dir over the session's pack venvs, basics and hosted built (once)."""
    old = os.environ.get("INLINE_BUILTIN_PACKS")
    os.environ["INLINE_BUILTIN_PACKS"] = str(builtin_dir)
    try:
        registry = shared_packs(tmp_path_factory, ("basics", "hosted"))
    finally:
        if old is None:
            os.environ.pop("INLINE_BUILTIN_PACKS", None)
        else:
            os.environ["INLINE_BUILTIN_PACKS"] = old
    assert not registry.failed, registry.failed
    assert "anthropic/complete" in registry.entries
    return data_dir_over(tmp_path_factory, "hosted-data")


@pytest.fixture(scope="session")
def hosted_python(hosted_data: Path) -> Path:
    """The hosted pack venv's interpreter (anthropic, google-genai)."""
    return next((hosted_data / "packs" / "hosted").glob("*/venv/bin/python"))


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream(PNG) as fake:
        yield fake
