"""Pack installs that share torch through uv's cache, and a host start that spawns no worker.

1. ``seconds`` / ``extra_disk_mb``: install a second pack that needs torch while a first one
   already has it (the whole install: scan, build, resolve with hashes, venv, handshake). Extra
   disk counts the bytes of the second version's folder whose files (inodes) the first pack's
   venv and uv's cache do not already hold. Baselines in the same run: a plain ``uv venv`` +
   ``uv pip install torch`` (``baseline_plain_uv_s``), and the second venv's apparent size
   (what a copy would cost, ``venv_apparent_mb``). Targets: < 10 s, < 50 MB.
2. ``cold_start_s``: with five packs installed, from starting ``python -m inline_host`` to the
   first answer of ``GET /v1/models``, with no worker spawned (descriptors come from the
   cache keyed by each locked environment's hash). Baseline: the same start after deleting
   the descriptor caches (``cold_start_uncached_s``: every pack's worker runs its handshake).
   Target < 1 s.

Writes bench/results/pack_install.json.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from _common import ROOT, write_result

WORK = ROOT / ".inline" / "bench-pack-install"
TORCH_NODE = """
from typing import Annotated
from inline_sdk import Context, NodeSpec, Output, hookimpl, node

@node("{name}/torch-version", title="Torch version", category="Bench")
def torch_version(ctx: Context) -> Annotated[str, Output("text", "Text")]:
    import torch  # imported in the worker only, when the node runs
    return torch.__version__

@hookimpl
def inline_nodes() -> list[NodeSpec]:
    return [torch_version]
"""
PLAIN_NODE = TORCH_NODE.replace("import torch", "import sys as torch").replace(
    "torch.__version__", "torch.version"
)


def write_pack(root: Path, name: str, deps: list[str], body: str) -> Path:
    module = f"inline_pack_{name.replace('-', '_')}"
    (root / "src" / module).mkdir(parents=True)
    (root / "src" / module / "__init__.py").write_text(body.replace("{name}", name))
    dep_list = ", ".join(f'"{d}"' for d in deps)
    (root / "pyproject.toml").write_text(
        f'[project]\nname = "inline-pack-{name}"\nversion = "1.0.0"\nlicense = "MIT"\n'
        f'requires-python = ">=3.11"\ndependencies = [{dep_list}]\n\n'
        f'[project.entry-points."inline.packs"]\n{name} = "{module}"\n\n'
        '[build-system]\nrequires = ["uv_build>=0.8,<0.15"]\nbuild-backend = "uv_build"\n\n'
        f'[tool.uv.build-backend]\nmodule-name = "{module}"\n'
    )
    return root


def inodes(root: Path) -> dict[tuple[int, int], int]:
    """(dev, inode) -> bytes on disk, for every file under ``root``."""
    found: dict[tuple[int, int], int] = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            st = os.lstat(os.path.join(dirpath, name))
            found[(st.st_dev, st.st_ino)] = st.st_blocks * 512
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def time_host_start(env: dict[str, str]) -> tuple[float, int, int]:
    """Seconds from spawning the server to its first /v1/models answer; models; workers."""
    import psutil

    port = free_port()
    env = {**env, "INLINE_PORT": str(port), "INLINE_HOST": "127.0.0.1"}
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "inline_host"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(proc.stderr.read().decode() if proc.stderr else "died")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5) as r:
                    body = json.load(r)
                break
            except OSError:
                time.sleep(0.01)
            if time.perf_counter() - start > 120:
                raise RuntimeError("the server did not answer within 120 s")
        took = time.perf_counter() - start
        workers = [
            p
            for p in psutil.Process(proc.pid).children(recursive=True)
            if "inline_sdk.worker" in " ".join(p.cmdline())
        ]
        models = body.get("models", body) if isinstance(body, dict) else body
        return took, len(models), len(workers)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> None:
    from uv import find_uv_bin

    shutil.rmtree(WORK, ignore_errors=True)
    (WORK / "no-builtin").mkdir(parents=True)
    data = WORK / "data"
    os.environ["INLINE_BUILTIN_PACKS"] = str(WORK / "no-builtin")
    os.environ["INLINE_DATA_DIR"] = str(data)
    os.environ.setdefault("INLINE_CONSTRAINTS", str(ROOT / "constraints" / "platform.txt"))
    os.environ.pop("INLINE_PACK_PATHS", None)
    from inline_registry import PackManager
    from inline_registry._uv import uv_env

    manager = PackManager(data)
    sdk = "inline-sdk>=1.0,<2"
    first = write_pack(WORK / "src" / "torch-a", "torch-a", [sdk, "torch"], TORCH_NODE)
    second = write_pack(WORK / "src" / "torch-b", "torch-b", [sdk, "torch"], TORCH_NODE)

    t = time.perf_counter()
    a = manager.install(str(first))
    first_s = time.perf_counter() - t
    t = time.perf_counter()
    b = manager.install(str(second))
    seconds = time.perf_counter() - t

    a_dir = data / "packs" / a.name / a.dir
    b_dir = data / "packs" / b.name / b.dir
    held = inodes(a_dir)
    b_files = inodes(b_dir)
    extra = sum(size for key, size in b_files.items() if key not in held)
    apparent = sum(
        os.lstat(os.path.join(d, f)).st_size for d, _, fs in os.walk(b_dir / "venv") for f in fs
    )

    # the baseline: a bare venv with torch by uv alone (same cache, same links, same wheels)
    plain = WORK / "plain-venv"
    uv = {"env": uv_env(), "check": True}
    t = time.perf_counter()
    subprocess.run([find_uv_bin(), "venv", "-q", "--python", sys.executable, str(plain)], **uv)
    subprocess.run(
        [find_uv_bin(), "pip", "install", "-q", "--python", str(plain / "bin" / "python"),
         "--constraint", os.environ["INLINE_CONSTRAINTS"], "torch"],
        **uv,
    )  # fmt: skip
    plain_s = time.perf_counter() - t

    for name in ("tiny-c", "tiny-d", "tiny-e"):
        manager.install(str(write_pack(WORK / "src" / name, name, [sdk], PLAIN_NODE)))
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["INLINE_MODELS_DIR"] = str(WORK / "models")
    cold, models, workers = time_host_start(env)
    cold_again, _, _ = time_host_start(env)
    for cache in (data / "packs").glob("*/*/welcome-*.json"):
        cache.unlink()
    uncached, _, _ = time_host_start(env)

    write_result(
        "pack_install",
        {
            "seconds": round(seconds, 2),
            "extra_disk_mb": round(extra / 1e6, 2),
            "cold_start_s": round(min(cold, cold_again), 3),
            "first_install_s": round(first_s, 2),
            "baseline_plain_uv_s": round(plain_s, 2),
            "ratio_vs_plain_uv": round(seconds / plain_s, 2),
            "venv_apparent_mb": round(apparent / 1e6, 1),
            "extra_vs_apparent": round(extra / max(apparent, 1), 4),
            "cold_start_uncached_s": round(uncached, 3),
            "ratio_cached_vs_uncached": round(min(cold, cold_again) / uncached, 3),
            "packs_installed": 5,
            "models_served": models,
            "workers_at_first_answer": workers,
            "targets": {"seconds": 10, "extra_disk_mb": 50, "cold_start_s": 1},
        },
    )
    shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
