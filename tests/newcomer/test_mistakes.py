"""Issue 26 item 4: a user's mistake at the command line is one line that says what to do (exit
2), never a traceback; ``--debug`` is how a traceback is asked for."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INLINE = Path(sys.executable).parent / "inline"


def inline(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "INLINE_DATA_DIR": str(tmp_path / "data"), **env}
    environ.pop("INLINE_DEBUG", None)
    return subprocess.run(
        [str(INLINE), *args], cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=120
    )


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and "ExceptionGroup" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("serve", "--port", "99999"), "'99999' is not a port: pick 1-65535"),
        (("serve", "--port", "http"), "'http' is not a port"),
        (("serve", "--vram-budget", "-3"), "'-3' is not a size: give GB above 0"),
        (("serve", "--vram-budget", "lots"), "'lots' is not a size"),
        (("serve", "--no-such-flag"), "unrecognized arguments: --no-such-flag"),
        (("frobnicate",), "invalid choice: 'frobnicate'"),
    ],
)
def test_a_bad_flag_is_one_line_pointing_at_help(tmp_path, args, says):
    line = one_line(inline(tmp_path, *args))
    assert says in line and line.endswith("--help)"), line


def test_a_vram_budget_on_a_machine_without_a_gpu_is_refused_not_ignored(tmp_path):
    # this machine (and CI's) has no GPU: the budget would cap nothing
    line = one_line(inline(tmp_path, "serve", "--vram-budget", "8"))
    assert line.startswith("error: --vram-budget 8: this machine has no GPU"), line
    assert "drop the flag" in line


def test_a_port_out_of_range_from_the_environment_is_one_line(tmp_path):
    line = one_line(inline(tmp_path, "serve", INLINE_PORT="99999"))
    assert line == "error: INLINE_PORT 99999 is not a port: pick 1-65535", line


def test_a_data_dir_that_cannot_be_created_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    line = one_line(inline(tmp_path, "serve", "--data-dir", str(blocker / "data")))
    assert line.startswith(f"error: cannot lock the data dir {blocker / 'data'}"), line
