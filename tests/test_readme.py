"""The README opens with exactly the two set-up commands, and CI runs the second one."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```sh\n(.*?)```", text, re.S)
    assert block is not None and text.index(block.group(0)) < text.index("\n\n", 10), (
        "the README must open with its commands"
    )
    return [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.strip()]


def test_readme_opens_with_exactly_two_commands():
    run, test = readme_commands()
    assert run == "./scripts/run" and test == "./scripts/test"


def test_ci_runs_the_readme_test_command_and_nothing_else():
    _, test = readme_commands()
    lines = [
        ln
        for ln in (ROOT / ".ci" / "run").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    assert lines == [f"exec {test}"]


def test_the_readme_run_command_renders_the_example(tmp_path):
    run, _ = readme_commands()
    env = dict(os.environ)
    env["INLINE_DATA_DIR"] = str(tmp_path / "data")
    proc = subprocess.run(
        ["bash", "-c", run], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("out/thumb.image.png")
    assert (ROOT / "out" / "thumb.image.png").stat().st_size > 0
