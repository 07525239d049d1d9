"""The README opens with exactly the two set-up commands, and CI runs the second one."""

from __future__ import annotations

import dataclasses
import os
import re
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import anyio
import httpx

from ._ports import free_port

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


# The "Writing a node" example: what `pack new` generates, then run for real ----------------
def readme_node_example() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Writing a node") :]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block is not None
    return block.group(1)


def one_pixel_png(rgb: tuple[int, int, int]) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + data))
        return struct.pack(">I", len(data)) + kind + data + crc

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00" + bytes(rgb))
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


def one_pixel_of(png: bytes) -> tuple[int, int, int]:
    """The RGB of a 1x1 8-bit RGB PNG (every PNG filter leaves a lone first pixel as it is)."""
    pos, idat = 8, b""
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        kind = png[pos + 4 : pos + 8]
        if kind == b"IHDR":
            assert png[pos + 8 : pos + 16] == struct.pack(">II", 1, 1)
        if kind == b"IDAT":
            idat += png[pos + 8 : pos + 8 + length]
        pos += 12 + length
    raw = zlib.decompress(idat)
    return raw[1], raw[2], raw[3]


def test_the_readme_node_example_is_what_pack_new_generates_and_runs(tmp_path):
    from inline_host import Engine, Settings
    from inline_registry import scaffold_pack
    from inline_sdk import SDK_VERSION

    major, minor = (int(p) for p in SDK_VERSION.split(".")[:2])
    pin = f'"inline-sdk>={major}.{minor},<{major + 1}"'
    readme = (ROOT / "README.md").read_text()
    pack = scaffold_pack("acme", tmp_path)
    pyproject = (pack / "pyproject.toml").read_text()
    # the README names what `pack new` writes: the module and the SDK pin
    assert 'acme = "inline_pack_acme"' in pyproject and pin in pyproject
    assert '`[project.entry-points."inline.packs"] acme = "inline_pack_acme"`' in readme
    assert f"`{pin}`" in readme and '`"pillow>=10"`' in readme
    assert (pack / "src" / "inline_pack_acme" / "__init__.py").is_file()
    (pack / "src" / "inline_pack_acme" / "__init__.py").write_text(readme_node_example())
    pyproject = pyproject.replace(pin, f'{pin}, "pillow>=10"').replace("acme/hello", "acme/invert")
    (pack / "pyproject.toml").write_text(pyproject)
    (tmp_path / "red.png").write_bytes(one_pixel_png((255, 0, 0)))
    doc = {
        "graph": {
            "schemaVersion": 1,
            "nodes": [
                {"id": "i", "type": "input/image",
                 "params": {"asset": {"ref": "path", "path": str(tmp_path / "red.png")}}},
                {"id": "v", "type": "acme/invert", "params": {"strength": 1.0},
                 "inputs": {"image": {"from": "i", "output": "image"}}},
            ],
        },
        "target": "v",
    }  # fmt: skip
    base = Settings.from_env(
        {
            "INLINE_SANDBOX_READ": os.environ.get("INLINE_SANDBOX_READ", ""),
            "INLINE_DATA_DIR": str(tmp_path / "data"),
            "INLINE_INPUT_ROOTS": str(tmp_path),
        }
    )
    settings = dataclasses.replace(base, extra_packs=(pack,))

    async def render() -> bytes:
        async with Engine.open(settings) as engine:
            result = await engine.run(doc)
            return bytes(engine.read_bytes(result.outputs["image"]))

    assert one_pixel_of(anyio.run(render)) == (0, 255, 255)


def test_the_readme_lists_every_v1_route(tmp_path):
    from inline_host import Settings
    from inline_host.api import create_app

    def shape(path: str) -> str:
        return re.sub(r"\{[^}]*\}", "{}", path).rstrip("/")

    app = create_app(
        Settings.from_env(
            {
                "INLINE_SANDBOX_READ": os.environ.get("INLINE_SANDBOX_READ", ""),
                "INLINE_DATA_DIR": str(tmp_path),
            }
        )
    )
    served = {shape(r.path) for r in app.routes if r.path.startswith("/v1")}
    text = (ROOT / "README.md").read_text()
    listed = {shape(p) for p in re.findall(r"/v1/[A-Za-z0-9_/{}.-]*", text)}
    listed |= {shape(p) + "/bytes" for p in listed if p.startswith("/v1/takes")}
    assert served - listed == set()
