"""What the suite builds once per session for every folder that needs it: pack venvs, tiny models.

Everything lives under one root that every pytest-xdist worker of a session shares (the session's
base temp; under xdist, the parent of each worker's own), and each build runs under a file lock
there: the first worker that needs a thing builds it, the others wait for it and reuse it.

A pack venv is keyed by the pack's fingerprint (``inline_registry.ensure_env``), so one packs dir
serves every folder, whatever packs each asks for. A folder that needs a data dir of its own (a
run store, logs, ``host.lock``) gets one whose ``packs`` links to the shared packs dir
(``data_dir_over``). Tests about building venvs on first use keep their own fresh data dirs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from inline_registry import file_lock

ROOT = Path(__file__).resolve().parent.parent
#: Builds one tiny model set: ``python SCRIPT OUT`` with a pack venv's interpreter.
TINY_ZIMAGE = ROOT / "tests" / "models" / "_tiny.py"
#: Set in a build's folder once it is complete (a folder without it is rebuilt).
BUILT = ".built"
#: What the build scripts run with: never the network, and no torchao native-library warnings.
QUIET = {"HF_HUB_OFFLINE": "1", "TORCHAO_FORCE_SKIP_LOADING_SO_FILES": "1"}


def shared_root(factory: pytest.TempPathFactory) -> Path:
    """The session's shared build root (the same folder in every xdist worker)."""
    base = factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # <session temp>/popen-gw<N>: the session's is one up
    root = base / "shared"
    root.mkdir(exist_ok=True)
    return root


def build_packs(packs_dir: Path, names: Sequence[str], extra: Sequence[Path] = ()) -> Any:
    """The registry over ``packs_dir`` with the venvs of the packs ``names`` built (the others
    stay lazy: a run builds what it needs, so tests build only what they use)."""
    from inline_registry import load_registry, prepare_env

    registry = load_registry(packs_dir, tuple(extra))
    assert not registry.failed, registry.failed
    for name in names:
        prepare_env(registry.packs[name].env)
    return load_registry(packs_dir, tuple(extra))


def shared_packs(
    factory: pytest.TempPathFactory, names: Sequence[str], extra: Sequence[Path] = ()
) -> Any:
    """The registry over the session's shared packs dir (``<root>/packs``), with the venvs of
    ``names`` built there (once per session, whichever folder or worker asks first)."""
    root = shared_root(factory)
    with file_lock(root / ".packs.build.lock"):
        return build_packs(root / "packs", names, extra)


def packs_dir(factory: pytest.TempPathFactory) -> Path:
    """The session's shared packs dir."""
    return shared_root(factory) / "packs"


def data_dir_over(factory: pytest.TempPathFactory, name: str) -> Path:
    """A new data dir of its own (``mktemp(name)``) whose ``packs`` is the shared packs dir,
    with a copy of the shared ``packs.lock`` as it is now: the recipes of the venvs built so far
    (Ray nodes build theirs from it). A copy, not a link, so that a venv another folder builds
    later never changes this data dir's lock under a running host (which reloads its packs)."""
    path = factory.mktemp(name)
    shared = packs_dir(factory)
    shared.mkdir(exist_ok=True)
    (path / "packs").symlink_to(shared, target_is_directory=True)
    with file_lock(shared / ".packs.lock.lock"):  # the registry's own lock on packs.lock
        lock = shared.parent / "packs.lock"
        if lock.is_file():
            shutil.copy(lock, path / "packs.lock")
    return path


def built_once(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """``<root>/<name>``, filled by ``build(folder)`` the first time any worker asks for it.

    A folder left half-built (a failed build) is cleared and built again.
    """
    root = shared_root(factory)
    out = root / name
    with file_lock(root / f".{name}.lock"):
        if not (out / BUILT).is_file():
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            build(out)
            (out / BUILT).write_text("")
    return out


def run_builder(python: Path, script: Path, out: Path, timeout: float = 600) -> None:
    """``python script out``: one of the tests' tiny-model builders, in a pack venv."""
    proc = subprocess.run(
        [str(python), str(script), str(out)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **QUIET},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]


def tiny_zimage(factory: pytest.TempPathFactory, python: Path) -> Path:
    """The tiny random Z-Image (``tests/models/_tiny.py``), built once per session with
    ``python`` (a zimage pack venv's)."""
    return built_once(factory, "tiny-zimage", lambda out: run_builder(python, TINY_ZIMAGE, out))
