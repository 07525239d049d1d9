"""A real two-node Ray cluster on loopback, started and stopped by the PIDs it started.

Each node gets its own loopback address (Ray swaps ``127.0.0.1`` for the machine's outward
address), one CPU and a small object store. Token auth is switched on with a per-run token
(``RAY_AUTH_MODE=token``, ``RAY_AUTH_TOKEN``), so ``~/.ray`` on this machine plays no part.
The nodes are started by ``_keeper.py``, a child subreaper: the daemons ``ray start`` leaves
are its descendants, and closing its stdin stops exactly those.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

HEAD_IP = "127.0.0.2"
WORKER_IP = "127.0.0.3"
OBJECT_STORE = 80 * 1024 * 1024
START_LIMIT = 900.0
KEEPER = Path(__file__).with_name("_keeper.py")


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
            "TMPDIR": str(temp_dir),
        }
    )
    return env


COMMON = ["--num-cpus", "1", "--num-gpus", "0", "--object-store-memory", str(OBJECT_STORE),
          "--disable-usage-stats"]  # fmt: skip


def node_args(temp_dir: Path, *, dashboard: bool = True) -> list[list[str]]:
    """``ray start`` arguments of the head and of the node with resource ``custom``."""
    head = [
        "--head",
        "--node-ip-address",
        HEAD_IP,
        "--port",
        str(_free_port(HEAD_IP)),
        "--ray-client-server-port",  # unused (the host is a driver on a node): off the default
        str(_free_port(HEAD_IP)),
        "--include-dashboard",
        "true" if dashboard else "false",  # Ray's state API is served by the dashboard
        "--dashboard-host",
        HEAD_IP,
        "--dashboard-port",
        str(_free_port(HEAD_IP)),
        "--temp-dir",
        str(temp_dir / "ray"),
        *COMMON,
    ]
    worker = ["--node-ip-address", WORKER_IP, "--resources", '{"custom": 1}', *COMMON]
    return [head, worker]


@contextlib.contextmanager
def two_nodes(temp_dir: Path, *, dashboard: bool = True) -> Iterator[Cluster]:
    """A head on 127.0.0.2 and a worker node on 127.0.0.3 with resource ``custom`` (and the
    dashboard, which serves Ray's state API, unless ``dashboard`` is false)."""
    with _kept(temp_dir, node_args(temp_dir, dashboard=dashboard), cluster_env(temp_dir)) as c:
        yield c


@contextlib.contextmanager
def one_more_node(cluster: Cluster, ip: str, resources: dict[str, float]) -> Iterator[Cluster]:
    """A node joining ``cluster`` on ``ip`` with ``resources``, kept by a keeper of its own
    (stopped on exit: whatever of it is still running)."""
    args = ["--address", cluster.address, "--node-ip-address", ip]
    args += ["--resources", json.dumps(resources), *COMMON]
    temp_dir = cluster.temp_dir / f"node-{ip}"
    with _kept(temp_dir, [args], cluster.env) as joined:
        yield joined


@contextlib.contextmanager
def _kept(temp_dir: Path, nodes: list[list[str]], env: dict[str, str]) -> Iterator[Cluster]:
    temp_dir.mkdir(parents=True, exist_ok=True)
    keeper = subprocess.Popen(
        [sys.executable, str(KEEPER), json.dumps(nodes)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=(temp_dir / "keeper.log").open("w"),
        text=True,
        env=env,
        start_new_session=True,
    )
    cluster = Cluster(address="", env=env, temp_dir=temp_dir, procs=[keeper])
    watchdog = threading.Timer(START_LIMIT, keeper.terminate)  # it stops its nodes first
    watchdog.start()
    try:
        assert keeper.stdout is not None
        for line in keeper.stdout:  # bounded: the keeper ends (EOF) on failure or watchdog
            if line.startswith("ADDRESS "):
                cluster.address = line.split()[1]
            elif line.startswith("READY"):
                break
            elif line.startswith("FAILED"):
                raise RuntimeError(f"the test cluster did not start: {line.strip()}")
        else:
            raise RuntimeError(f"the test cluster did not start (see {temp_dir}/keeper.log)")
        watchdog.cancel()
        yield cluster
    finally:
        watchdog.cancel()
        stop(cluster)


def stop(cluster: Cluster) -> None:
    """Stop the keeper, which stops every process the nodes started."""
    for proc in cluster.procs:
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.terminate()
            proc.wait(timeout=30)
