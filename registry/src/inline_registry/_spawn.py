"""Starting a pack worker: its venv's python, an inherited socketpair fd, stdout kept off it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from ._sandbox import Confinement, apply_env, confined_command


def worker_command(python: Path, pack: str, fd: int) -> list[str]:
    """The command line of a worker serving ``pack`` over fd ``fd``."""
    return [str(python), "-m", "inline_sdk.worker", "--fd", str(fd), "--pack", pack]


#: Host variables a worker inherits by name: the system's basics, locale, temp dirs, proxies and
#: CA bundles (the hosted pack reaches its API), the accelerator and thread knobs.
WORKER_ENV_NAMES: Final = frozenset(
    {
        "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR", "TEMP",
        "TMP", "SHELL", "LD_LIBRARY_PATH", "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED",
        "PYTHONWARNINGS", "HF_HOME", "HF_HUB_CACHE", "HF_ENDPOINT", "SSL_CERT_FILE",
        "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "HTTP_PROXY", "HTTPS_PROXY",
        "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy", "all_proxy",
        "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TOKENIZERS_PARALLELISM",
    }
)  # fmt: skip
#: ... and every variable with one of these prefixes (``INLINE_*`` carries the engine's knobs and
#: the hosted pack's ``INLINE_ANTHROPIC_BASE_URL`` / ``INLINE_GEMINI_BASE_URL``).
WORKER_ENV_PREFIXES: Final = (
    "INLINE_", "LC_", "CUDA_", "NVIDIA_", "PYTORCH_", "TORCH", "XDG_", "NCCL_", "MKL_", "KMP_",
    "OMP_", "TRITON_", "HIP_", "ROCR_", "HSA_", "RAY_", "COVERAGE_",
)  # fmt: skip
#: Never passed, whatever the lists say: the host's own credentials, and where its data is
#: (the run store, the secrets file, the operator token).
WORKER_ENV_DENY: Final = frozenset({"INLINE_TOKEN", "INLINE_DATA_DIR"})


def worker_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a worker runs in: an allow-list of the host's variables (never its keys
    or tokens: a node gets the secrets it names in its call), offline for model hubs,
    unbuffered, no host venv leak."""
    env = {
        k: v
        for k, v in os.environ.items()
        if (k in WORKER_ENV_NAMES or k.startswith(WORKER_ENV_PREFIXES)) and k not in WORKER_ENV_DENY
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
    python: Path,
    pack: str,
    *,
    env: Mapping[str, str] | None = None,
    confinement: Confinement | None = None,
) -> tuple[subprocess.Popen[bytes], socket.socket]:
    """Start a worker (blocking API), sandboxed in ``confinement`` when given; returns the
    process and the host's end of the socket."""
    host_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    command = worker_command(python, pack, child_end.fileno())
    variables = worker_env(env)
    if confinement is not None:
        command, changes = confined_command(command, confinement)
        variables = apply_env(variables, changes)
    try:
        proc = subprocess.Popen(
            command,
            pass_fds=(child_end.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=variables,
            close_fds=True,
        )
    finally:
        child_end.close()
    return proc, host_end


def current_python() -> str:
    """The interpreter pack venvs are built for (the host's own)."""
    return sys.executable
