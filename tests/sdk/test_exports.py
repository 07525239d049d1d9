"""Public faces: __all__ lists every public name, and the SDK imports nothing heavy."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGES = [
    "inline_sdk",
    "inline_sdk.protocol",
    "inline_sdk.chat",
    "inline_sdk.embed",
    "inline_sdk.batch",
    "inline_sdk.mesh",
    "inline_core",
    "inline_registry",
    "inline_host",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_matches_public_names(name):
    module = importlib.import_module(name)
    public = {
        n
        for n, v in vars(module).items()
        if not n.startswith("_") and n != "annotations" and not isinstance(v, type(sys))
    }
    assert set(module.__all__) == public
    assert isinstance(module.__all__, tuple)


def test_sdk_imports_only_stdlib_msgspec_and_pluggy():
    code = (
        "import sys, inline_sdk, inline_sdk.protocol, inline_sdk.hookspecs\n"
        "roots = {m.split('.')[0] for m in sys.modules}\n"
        "std = set(sys.stdlib_module_names) | {'__main__', '_distutils_hack', 'sitecustomize'}\n"
        "print(sorted(r for r in roots if r not in std and not r.startswith('_')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # typing_extensions is msgspec's own dependency, imported by msgspec itself
    assert set(eval(out.stdout)) <= {"inline_sdk", "msgspec", "pluggy", "typing_extensions"}


def test_sdk_installs_and_imports_alone_in_a_bare_venv(tmp_path):
    from uv import find_uv_bin

    root = Path(__file__).resolve().parents[2]
    venv = tmp_path / "bare"
    uv = find_uv_bin()
    subprocess.run([uv, "venv", "--quiet", "--python", sys.executable, str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [uv, "pip", "install", "--quiet", "--python", str(python), str(root / "sdk")], check=True
    )
    code = (
        "import sys, inline_sdk, inline_sdk.protocol\n"
        "import importlib.metadata as md\n"
        "print(sorted(d.metadata['Name'] for d in md.distributions()))\n"
    )
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
    assert eval(out.stdout) == ["inline-sdk", "msgspec", "pluggy"]
