"""Shared fixtures: the anyio backend, a guard that records any attempt to import torch, the
markers of the suite's tiers (``torch``, ``ray``, ``slow``), given by where a test lives, and how
pytest-xdist runs the suite (``tests/_xdist.py``). What every folder builds once per session
(pack venvs, tiny models) is in ``tests/_builds.py``."""

from __future__ import annotations

import getpass
import importlib.abc
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

HEAVY = ("torch", "diffusers", "transformers")
#: Where the tests that build a torch pack venv (and tiny models) live, file or folder.
TORCH_TESTS = (
    "tests/models/",
    "tests/generate/",
    "tests/text/test_client.py",
    "tests/text/test_openai",  # test_openai.py and its test_openai_*.py siblings
    "tests/text/test_embed.py",
    "tests/text/test_anthropic.py",
    "tests/text/test_example_deploy.py",
    "tests/chaos/test_lora_hostile.py",
    "tests/chaos/test_first_use.py",
    "tests/newcomer/test_demo_models.py",
    "tests/newcomer/test_examples.py",
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


#: What an xdist worker sets on its own (80 and 24: GNU readline fills them in), and uv wraps
#: its messages at ``COLUMNS``: each worker gets the controller's instead.
TERMINAL_ENV = ("COLUMNS", "LINES")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    node.workerinput["terminal_env"] = {name: os.environ.get(name) for name in TERMINAL_ENV}


#: Every test's temporary files (gates a test node waits on, inputs), which the sandboxed
#: workers of the servers the tests start may read (a test that checks what a sandboxed worker
#: cannot read starts its server without it).
SANDBOX_READ = Path(tempfile.gettempdir()) / f"pytest-of-{getpass.getuser()}"


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("INLINE_SANDBOX_READ", str(SANDBOX_READ))
    given = getattr(config, "workerinput", {}).get("terminal_env")
    for name, value in (given or {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under pytest-xdist (``./scripts/test`` runs it on every core), a test file at a time per
    worker, the Ray tests all in one, the longest first (``tests/_xdist.py``)."""
    from ._xdist import FileScheduling

    return FileScheduling(config, log)


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
    """The recorder, cleared: what the test itself attempts (an earlier test in this process,
    say one of the SDK's that tries ``import torch`` on purpose, does not count)."""
    RECORDER.attempts.clear()
    return RECORDER
