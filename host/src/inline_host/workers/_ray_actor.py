"""The Ray actor that runs one pack worker on a cluster node.

The actor lives in the host's own environment (the one Ray runs on every node), never in the
pack's venv: it builds (or reuses) the pack's venv on its node from the recipe ``packs.lock``
gives, then starts ``python -m inline_sdk.worker --connect HOST:PORT`` from that venv, which
dials the host and presents its secret. Pack venvs never need Ray. The worker dies with the
actor (``PR_SET_PDEATHSIG``), so a killed actor never leaves a worker behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import msgspec
from inline_registry import EnvRecipe, apply_env, confined_command, materialize, worker_env

#: Where the worker reads its secret (the SDK's name for it; see ``_launchers.SECRET_ENV``).
SECRET_ENV = "INLINE_WORKER_SECRET"
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def worker_environment(secret: str) -> dict[str, str]:
    """The worker's environment: the registry's, without Ray's variables (its cluster token
    among them: a worker never asked for it) and with its own secret."""
    env = {k: v for k, v in worker_env({SECRET_ENV: secret}).items() if not k.startswith("RAY_")}
    return env


class PackActor:
    """One pack worker on this node (Ray runs several methods at once: ``max_concurrency``)."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None

    def start(
        self,
        recipe: bytes,
        packs_dir: str,
        connect: str,
        secret: str,
        knobs: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Build or reuse the venv, start the worker (sandboxed on this node as the host's
        ``knobs`` say: ``node_knobs``); where it runs."""
        import ray

        from ._sandbox import node_sandboxing

        ctx = ray.get_runtime_context()
        node_id = ctx.get_node_id()
        address = ray.util.get_node_ip_address()
        began = time.monotonic()
        env_recipe = msgspec.msgpack.decode(recipe, type=EnvRecipe)
        python, venv = materialize(env_recipe, Path(packs_dir), node=f"node {address}")
        built_s = time.monotonic() - began
        command = [str(python), "-m", "inline_sdk.worker", "--connect", connect,
                   "--pack", env_recipe.pack]  # fmt: skip
        env = worker_environment(secret)
        # it dials the host: it keeps the network, and nothing else of this node's
        pack = env_recipe.pack
        confinement = (
            node_sandboxing(knobs, pack).confinement(pack, Path(python), network=True)
            if knobs
            else None
        )
        if confinement is not None:
            command, changes = confined_command(command, confinement)
            env = apply_env(env, changes)
        self._proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        return {
            "nodeId": node_id,
            "nodeAddress": address,
            "actorId": ctx.get_actor_id(),
            "actorPid": os.getpid(),
            "pid": self._proc.pid,
            "venv": venv,
            "venvSeconds": round(built_s, 3),
            "sandboxed": confinement is not None,
        }

    def read_stderr(self) -> bytes:
        """The worker's next stderr bytes (blocks until some; empty at its end)."""
        if self._proc is None or self._proc.stderr is None:
            return b""
        return os.read(self._proc.stderr.fileno(), 65536)

    def wait(self) -> int:
        """Wait for the worker to end; its exit status."""
        if self._proc is None:
            return 0
        return self._proc.wait()

    def kill(self) -> None:
        """Stop the worker and everything it started."""
        if self._proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, signal.SIGKILL)
