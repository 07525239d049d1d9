"""A trivial node call through a Ray actor vs through the local launcher, in one run.

Starts a real two-node Ray cluster on loopback (``tests/ray/_cluster.py``: 127.0.0.2 and
127.0.0.3, a per-run token, stopped by the PIDs it started), then times ``benchpack/noop``
calls through the supervisor with the local launcher and with ``INLINE_RAY_ADDRESS``.
Writes bench/results/ray.json: ``per_call_us``, ``local_per_call_us``, ``ratio`` and
``cold_start_s`` (the first call on a fresh actor: placement, venv reused on the node, worker
start, handshake).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import anyio
from _common import HERE, ROOT, bench_settings, median, write_result

# this file is named ray.py: keep its folder off the path, so ``import ray`` finds Ray
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(ROOT))
from tests.ray._cluster import two_nodes  # noqa: E402 (after the path fix above)

CALLS = 1000
WARMUP = 100
COLD = 3


async def per_call_us(settings: object) -> tuple[float, list[float]]:
    from inline_host import Engine

    async with Engine.open(settings) as engine:  # type: ignore[arg-type]
        sup = engine.supervisor
        colds: list[float] = []
        for _ in range(COLD):  # each time a fresh worker (a fresh actor through Ray)
            t = time.perf_counter()
            await sup.call("benchpack", "benchpack/noop", "n", {"n": 0}, {})
            colds.append(time.perf_counter() - t)
            await sup.workers()["benchpack"].stop()
        for i in range(WARMUP):
            await sup.call("benchpack", "benchpack/noop", "n", {"n": i}, {})
        samples = []
        for i in range(CALLS):
            t = time.perf_counter_ns()
            await sup.call("benchpack", "benchpack/noop", "n", {"n": i}, {})
            samples.append((time.perf_counter_ns() - t) / 1000)
    return median(samples), colds


def main() -> None:
    base = bench_settings()
    local_us, local_cold = anyio.run(per_call_us, base)
    with (
        tempfile.TemporaryDirectory(prefix="ir-bench-", dir="/tmp") as tmp,
        two_nodes(Path(tmp), dashboard=False) as cluster,
    ):
        for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_USAGE_STATS_ENABLED"):
            os.environ[name] = cluster.env[name]
        t = time.perf_counter()
        import ray

        ray.init(address=cluster.address, _node_ip_address="127.0.0.2", log_to_driver=False)
        join_s = time.perf_counter() - t
        ray_settings = replace(base, ray_address=cluster.address)
        ray_us, ray_cold = anyio.run(per_call_us, ray_settings)
        ray.shutdown()
    write_result(
        "ray",
        {
            "per_call_us": round(ray_us, 1),
            "local_per_call_us": round(local_us, 1),
            "ratio": round(ray_us / local_us, 2),
            "cold_start_s": round(median(ray_cold), 3),
            "local_cold_start_s": round(median(local_cold), 3),
            "join_s": round(join_s, 3),
            "calls": CALLS,
        },
    )


if __name__ == "__main__":
    main()
