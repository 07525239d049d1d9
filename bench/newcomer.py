"""A newcomer's first hour, timed: the README's path from a fresh clone to a streamed completion,
a Z-Image render and a mesh, offline, on the demo models.

``python bench/newcomer.py``: clones this checkout (its committed ``HEAD``) into a temporary
folder and times each step there as a newcomer takes it: the set-up (``scripts/_bootstrap.sh``:
uv, the workspace), ``inline demo models`` (the packs' venvs built on first use, then every
family's tiny models), the server's start (``inline serve``), then ``examples/run.py`` on
``text_complete.json``, ``zimage.json`` and ``mesh.json``. uv's cache is this machine's as it is
(a first machine downloads the wheels once). Prints and writes ``bench/results/newcomer.json``:
each step's seconds, ``total_s`` and ``under_5_min`` (the target).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, write_result

TARGET_S = 300.0
EXAMPLES = ("text_complete", "zimage", "mesh")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    steps: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="inline-newcomer-") as tmp:
        clone = Path(tmp) / "inline"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("INLINE_")}
        started = time.perf_counter()

        def step(name: str, *argv: str, timeout: float = 1800) -> None:
            t0 = time.perf_counter()
            done = subprocess.run(argv, cwd=clone, env=env, capture_output=True, text=True,
                                  timeout=timeout)  # fmt: skip
            steps[f"{name}_s"] = round(time.perf_counter() - t0, 1)
            if done.returncode != 0:
                sys.exit(f"{name} failed ({done.returncode}): {done.stderr[-3000:]}")

        step("setup", "bash", "-c", "source scripts/_bootstrap.sh")
        inline = str(clone / ".venv" / "bin" / "inline")
        step("demo_models", inline, "demo", "models")
        port = free_port()
        t0 = time.perf_counter()
        server = subprocess.Popen([inline, "serve", "--port", str(port)], cwd=clone, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 300
            while True:  # polling another process's start, bounded
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1):
                        break
                except OSError:
                    if server.poll() is not None or time.monotonic() > deadline:
                        sys.exit("the server did not start")
                    time.sleep(0.1)
            steps["serve_s"] = round(time.perf_counter() - t0, 1)
            python = str(clone / ".venv" / "bin" / "python")
            for name in EXAMPLES:
                step(name, python, "examples/run.py", f"examples/{name}.json", "--url", url)
        finally:
            server.terminate()
            server.wait(timeout=60)
        total = time.perf_counter() - started
    figures = {
        **steps,
        "total_s": round(total, 1),
        "target_s": TARGET_S,
        "under_5_min": total < TARGET_S,
    }
    write_result("newcomer", figures)


if __name__ == "__main__":
    main()
