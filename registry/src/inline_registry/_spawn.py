"""Starting a pack worker: its venv's python, an inherited socketpair fd, stdout kept off it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path


def worker_command(python: Path, pack: str, fd: int) -> list[str]:
    """The command line of a worker serving ``pack`` over fd ``fd``."""
    return [str(python), "-m", "inline_sdk.worker", "--fd", str(fd), "--pack", pack]


def worker_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a worker runs in: offline for model hubs, unbuffered, no host venv leak."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")
    }
    env.update(
        {
            "PYTHONUNBUFFERED": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "DIFFUSERS_OFFLINE": "1",
        }
    )
    if extra:
        env.update(extra)
    return env


def spawn_worker_sync(
    python: Path, pack: str, *, env: Mapping[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], socket.socket]:
    """Start a worker (blocking API); returns the process and the host's end of the socket."""
    host_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        proc = subprocess.Popen(
            worker_command(python, pack, child_end.fileno()),
            pass_fds=(child_end.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=worker_env(env),
            close_fds=True,
        )
    finally:
        child_end.close()
    return proc, host_end


def current_python() -> str:
    """The interpreter pack venvs are built for (the host's own)."""
    return sys.executable
