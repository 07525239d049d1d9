"""The kernel's public face: ``__all__`` is exactly the public names, and no torch at import."""

from __future__ import annotations

import subprocess
import sys

import inline_core


def test_all_lists_every_public_name() -> None:
    public = {n for n in vars(inline_core) if not n.startswith("_") and n != "annotations"}
    assert isinstance(inline_core.__all__, tuple)
    assert set(inline_core.__all__) == public


def test_importing_the_kernel_imports_no_torch() -> None:
    code = (
        "import sys, inline_core\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
