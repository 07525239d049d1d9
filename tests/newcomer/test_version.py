"""Item 7: ``inline --version``, ``./webui.sh --version``, ``python main.py --version``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from inline_host._settings import versions
from inline_sdk import SDK_VERSION
from inline_sdk.protocol import PROTOCOL

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "command",
    [
        [str(ROOT / ".venv" / "bin" / "inline"), "--version"],
        [str(ROOT / "webui.sh"), "--version"],
        [sys.executable, str(ROOT / "main.py"), "--version"],
    ],
    ids=["inline", "webui.sh", "main.py"],
)
def test_version_prints_engine_sdk_and_protocol(command):
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    v = versions()  # what /v1/health reports under "version"
    assert v["sdk"] == SDK_VERSION and v["protocol"] == PROTOCOL
    assert proc.stdout == f"inline {v['engine']} (sdk {SDK_VERSION}, protocol {PROTOCOL})\n"
