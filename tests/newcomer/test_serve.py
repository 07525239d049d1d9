"""Items 9 and 12: starting the server (taken port, front-end root, SPA routes)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from .._ports import free_port

ROOT = Path(__file__).resolve().parents[2]


def wait_healthy(
    proc: subprocess.Popen[bytes], base: str, headers: dict[str, str] | None = None
) -> None:
    """Until the server at ``base`` answers /v1/health (bounded; a server that exits fails)."""
    deadline = time.monotonic() + 120
    while True:
        assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
        try:
            if httpx.get(f"{base}/v1/health", headers=headers, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.2)  # polling a starting server


def env_for(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "INLINE_DATA_DIR": str(tmp_path / "data")}
    env.pop("INLINE_PORT", None)
    return env


def test_a_taken_port_is_one_line_before_anything_claims_to_serve(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "main.py", "--port", str(port)],
            cwd=ROOT,
            env=env_for(tmp_path),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 2
    assert proc.stderr == (
        f"error: port {port} on 127.0.0.1 is already in use (another Inline running?): "
        "pick another with --port N (or INLINE_PORT)\n"
    )


def test_a_missing_front_end_root_is_an_error_at_start(tmp_path):
    proc = subprocess.run(
        [sys.executable, "main.py", "--front-end-root", str(tmp_path / "dist")],
        cwd=ROOT,
        env=env_for(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr == f"error: --front-end-root {tmp_path / 'dist'} is not a folder\n"


def test_a_single_page_app_gets_index_html_for_its_own_routes(tmp_path):
    site = tmp_path / "dist"
    site.mkdir()
    (site / "index.html").write_text("<html>studio</html>")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "main.py", "--port", str(port), "--front-end-root", str(site)],
        cwd=ROOT,
        env=env_for(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, base)
        r = httpx.get(f"{base}/projects/42/edit", timeout=10)
        assert (r.status_code, r.text) == (200, "<html>studio</html>")
        r = httpx.get(f"{base}/v1/nothing-here", timeout=10)
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_token_can_come_from_a_file_and_stays_out_of_ps(tmp_path):
    """`python main.py --listen --token-file FILE`: served with the file's token; the command
    line (what `ps` shows) never holds it."""
    secret = tmp_path / "token"
    secret.write_text("s3cret-from-file\n")
    port = free_port()
    command = [sys.executable, "main.py", "--listen", "127.0.0.1", "--port", str(port),
               "--token-file", str(secret)]  # fmt: skip
    proc = subprocess.Popen(
        command, cwd=ROOT, env=env_for(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    base = f"http://127.0.0.1:{port}"
    auth = {"Authorization": "Bearer s3cret-from-file"}
    try:
        wait_healthy(proc, base, auth)
        assert httpx.get(f"{base}/v1/health", timeout=10).status_code == 401
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode()
        assert "s3cret-from-file" not in cmdline
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    empty = tmp_path / "empty"
    empty.write_text("")
    out = subprocess.run(
        [sys.executable, "main.py", "--token-file", str(empty)],
        cwd=ROOT, env=env_for(tmp_path), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert (out.returncode, out.stderr) == (1, f"error: --token-file {empty} is empty\n")


def test_inline_serve_is_the_same_server_with_the_same_flags(tmp_path):
    """`inline serve --port N --data-dir D` serves /v1 as main.py does; a taken port is the
    same one line and exit 2."""
    inline = str(Path(sys.executable).parent / "inline")
    port = free_port()
    data = tmp_path / "served"
    proc = subprocess.Popen(
        [inline, "serve", "--port", str(port), "--data-dir", str(data)],
        cwd=ROOT,
        env=env_for(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, base)
        assert (data / "host.lock").exists()  # --data-dir was the one it took
        taken = subprocess.run(
            [inline, "serve", "--port", str(port), "--data-dir", str(tmp_path / "other")],
            cwd=ROOT, env=env_for(tmp_path), capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert taken.returncode == 2
        assert taken.stderr.endswith(f"error: port {port} on 127.0.0.1 is already in use "
                                     "(another Inline running?): pick another with --port N "
                                     "(or INLINE_PORT)\n")  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(timeout=30)
