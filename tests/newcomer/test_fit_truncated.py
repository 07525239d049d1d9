"""Item 12: `inline models fit` on a truncated file says it is truncated."""

from __future__ import annotations

import json
import struct
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def write(path: Path, data_bytes: int, *, cut_header: bool = False) -> Path:
    header = json.dumps(
        {"w": {"dtype": "F32", "shape": [1024, 1024], "data_offsets": [0, 4 * 1024 * 1024]}}
    ).encode()
    body = header[:20] if cut_header else header + bytes(data_bytes)
    path.write_bytes(struct.pack("<Q", len(header)) + body)
    return path


def fit(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ROOT / ".venv" / "bin" / "inline"), "models", "fit", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_file_cut_short_in_its_tensors_is_called_truncated(tmp_path):
    path = write(tmp_path / "cut.safetensors", 1000)
    proc = fit(path)
    assert proc.returncode == 2
    need = 8 + len(path.read_bytes()) - 8 - 1000 + 4 * 1024 * 1024
    have = path.stat().st_size
    assert proc.stderr == (
        f"error: '{path}' is truncated: its tensors need {need} bytes, the file has {have} "
        f"({need - have} missing); download it again\n"
    )


def test_a_file_cut_short_in_its_header_is_called_truncated(tmp_path):
    path = write(tmp_path / "cut.safetensors", 0, cut_header=True)
    proc = fit(path)
    assert proc.returncode == 2
    assert f"error: '{path}' is truncated: its header announces" in proc.stderr
