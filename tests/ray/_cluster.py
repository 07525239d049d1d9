"""A real two-node Ray cluster on loopback, started and stopped by the PIDs it started.

Each node gets its own loopback address (Ray swaps ``127.0.0.1`` for the machine's outward
address), one CPU and a small object store. Token auth is switched on with a per-run token
(``RAY_AUTH_MODE=token``, ``RAY_AUTH_TOKEN``), so ``~/.ray`` on this machine plays no part.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

HEAD_IP = "127.0.0.2"
WORKER_IP = "127.0.0.3"
OBJECT_STORE = 80 * 1024 * 1024
_ADDRESS = re.compile(r"ray start --address='([0-9.]+:[0-9]+)'")
_READY = "Ray runtime started."
START_LIMIT = 240.0


@dataclass
class Cluster:
    """A started cluster: where to reach it and what to stop."""

    address: str
    env: dict[str, str]
    temp_dir: Path
    procs: list[subprocess.Popen[str]] = field(default_factory=list)


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _ray_bin() -> str:
    return str(Path(sys.executable).with_name("ray"))


def _start_node(
    args: list[str], env: dict[str, str], log: Path, *, head: bool, started: list[Any]
) -> tuple[subprocess.Popen[str], str]:
    """``ray start ... --block``; returns once it printed that the runtime started (and, for
    a head, the address other nodes join). A node not up within ``START_LIMIT`` is killed."""
    proc = subprocess.Popen(
        [_ray_bin(), "start", "--block", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
        start_new_session=True,
    )
    started.append(proc)
    watchdog = threading.Timer(START_LIMIT, proc.kill)
    watchdog.start()
    assert proc.stdout is not None
    seen: list[str] = []
    address = ""
    ready = False
    for line in proc.stdout:  # bounded: the process ends (EOF) if the node fails to start
        seen.append(line)
        if m := _ADDRESS.search(line):
            address = m.group(1)
        ready = ready or _READY in line
        if ready and (address or not head):
            break
    else:
        watchdog.cancel()
        log.write_text("".join(seen))
        raise RuntimeError(f"ray start failed:\n{''.join(seen[-30:])}")
    watchdog.cancel()
    # keep draining its output, so the node never blocks on a full pipe
    threading.Thread(target=_drain, args=(proc, log), daemon=True).start()
    return proc, address


def _drain(proc: subprocess.Popen[str], log: Path) -> None:
    assert proc.stdout is not None
    with open(log, "a") as fh:
        for line in proc.stdout:
            fh.write(line)


def cluster_env(temp_dir: Path) -> dict[str, str]:
    """The environment every cluster process and driver of this run uses."""
    env = dict(os.environ)
    for name in ("RAY_ADDRESS", "RAY_AUTH_TOKEN_PATH"):
        env.pop(name, None)
    env.update(
        {
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": secrets.token_hex(32),
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_DISABLE_DOCKER_CPU_WARNING": "1",
            "TMPDIR": str(temp_dir),
        }
    )
    return env


@contextlib.contextmanager
def two_nodes(temp_dir: Path) -> Iterator[Cluster]:
    """A head on 127.0.0.2 and a worker node on 127.0.0.3 with resource ``custom``."""
    temp_dir.mkdir(parents=True, exist_ok=True)
    env = cluster_env(temp_dir)
    common = [
        "--num-cpus",
        "1",
        "--num-gpus",
        "0",
        "--object-store-memory",
        str(OBJECT_STORE),
        "--disable-usage-stats",
    ]
    cluster = Cluster(address="", env=env, temp_dir=temp_dir)
    try:
        _, address = _start_node(
            [
                "--head",
                "--node-ip-address",
                HEAD_IP,
                "--port",
                "0",
                "--ray-client-server-port",  # unused (the host is a driver on a node), but
                str(_free_port(HEAD_IP)),  # it cannot be switched off: not the default port
                "--include-dashboard",
                "true",  # Ray's state API is served by the dashboard
                "--dashboard-host",
                HEAD_IP,
                "--dashboard-port",
                str(_free_port(HEAD_IP)),
                "--temp-dir",
                str(temp_dir / "ray"),
                *common,
            ],
            env,
            temp_dir / "head.log",
            head=True,
            started=cluster.procs,
        )
        cluster.address = address
        _start_node(
            [
                "--address",
                address,
                "--node-ip-address",
                WORKER_IP,
                "--resources",
                '{"custom": 1}',
                *common,
            ],
            env,
            temp_dir / "worker.log",
            head=False,
            started=cluster.procs,
        )
        yield cluster
    finally:
        stop(cluster)


def stop(cluster: Cluster) -> None:
    """Stop every process the nodes started: the ``ray start`` PIDs and their descendants."""
    victims: list[psutil.Process] = []
    for proc in cluster.procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            parent = psutil.Process(proc.pid)
            victims.extend(parent.children(recursive=True))
            victims.append(parent)
    for p in reversed(cluster.procs):
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGTERM)
    _, alive = psutil.wait_procs(victims, timeout=15)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(alive, timeout=10)
