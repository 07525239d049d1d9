"""The README opens with exactly the two set-up commands, and CI runs the second one."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

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


def test_the_readme_run_command_serves_v1(tmp_path):
    run, _ = readme_commands()
    port = free_port()
    env = dict(os.environ)
    env.update({"INLINE_DATA_DIR": str(tmp_path / "data"), "INLINE_PORT": str(port)})
    proc = subprocess.Popen(
        ["bash", "-c", f"exec {run}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        health = wait_for(f"http://127.0.0.1:{port}/v1/health", proc)
        assert health["ok"] is True and health["apiVersion"] == "v1"
        models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=30).json()
        assert "image/resize" in {m["type"] for m in models["models"]}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_cli_renders_the_example_through_the_run_script(tmp_path):
    env = dict(os.environ)
    env["INLINE_DATA_DIR"] = str(tmp_path / "data")
    out = tmp_path / "out"
    proc = subprocess.run(
        ["./scripts/run", "run", "examples/basics.json", "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(out / "thumb.image.png")


def test_webui_help_lists_the_friendly_flags():
    out = subprocess.run(
        ["./webui.sh", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0
    for flag in (
        "--listen",
        "--port",
        "--lowvram",
        "--multi-gpu",
        "--data-dir",
        "--models-dir",
        "--token",
        "--install",
        "--front-end-root",
    ):
        assert flag in out.stdout


def test_main_py_serves_a_front_end_root(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("<html>studio</html>")
    port = free_port()
    env = dict(os.environ)
    env.update({"INLINE_DATA_DIR": str(tmp_path / "data"), "INLINE_PORT": str(port)})
    proc = subprocess.Popen(
        [sys.executable, "main.py", "--front-end-root", str(site)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for(f"http://127.0.0.1:{port}/v1/health", proc)
        assert "studio" in httpx.get(f"http://127.0.0.1:{port}/", timeout=10).text
        assert httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=10).status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url: str, proc: subprocess.Popen[bytes], timeout: float = 300) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(proc.stdout.read().decode() if proc.stdout else "exited")
        try:
            return httpx.get(url, timeout=2).json()
        except httpx.HTTPError:
            time.sleep(0.2)  # polling a starting server
    raise AssertionError("server did not come up")
