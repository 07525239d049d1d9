"""The code we want to live in: ruff clean everywhere, pyright basic clean on the typed trees."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_check_is_clean():
    proc = run(str(BIN / "ruff"), "check", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_format_is_clean():
    proc = run(str(BIN / "ruff"), "format", "--check", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr


# One pyright run over every tree: it starts once and reads the shared imports once.
TYPED_TREES = ("sdk/src", "core/src", "registry/src", "client/src", "host/src")


def test_pyright_basic_is_clean_on_the_typed_trees():
    proc = run(str(BIN / "pyright"), "--pythonpath", sys.executable, *TYPED_TREES)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 errors" in proc.stdout
