"""A trivial node call through a Ray actor vs through the local launcher, in one run.

Starts a real two-node Ray cluster on loopback (``tests/ray/_cluster.py``: 127.0.0.2 and
127.0.0.3, a per-run token, stopped by the PIDs it started), then times ``benchpack/noop``
calls through the supervisor with the local launcher and with ``INLINE_RAY_ADDRESS``.
Writes bench/results/ray.json: ``per_call_us``, ``local_per_call_us``, ``ratio`` and
``cold_start_s`` (the first call on a fresh actor: placement, venv reused on the node, worker
start, handshake).

Then the same host deploys ``benchpack`` on Ray Serve (``DeploymentService``, as
``tests/ray/test_serve.py`` does) and adds: ``serve_throughput_ratio``, 8 calls of
``benchpack/sleep`` (1 s each; concurrency 1, so a call holds its replica) issued at once
through a deployment of 2 replicas (one a node), then of 1: wall time with 1 / wall time with 2
(2.0 at best); ``serve_per_call_us``, the median of 300 ``benchpack/noop`` calls (after a
warmup) through the deployment of 1 replica, and ``serve_per_call_ratio`` (it over
``local_per_call_us``).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
from _common import HERE, ROOT, bench_settings, median, write_result

# this file is named ray.py: keep its folder off the path, so ``import ray`` finds Ray
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(ROOT))
from tests.ray._cluster import two_nodes  # noqa: E402 (after the path fix above)

CALLS = 1000
WARMUP = 100
COLD = 3
SERVE_CALLS = 300
SERVE_WARMUP = 30
SLEEPS = 8
SLEEP_S = 1.0


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


async def _at_once(engine: Any, count: int, seconds: float) -> float:
    """Wall seconds of ``count`` ``benchpack/sleep`` calls of ``seconds`` issued at once."""
    sup = engine.supervisor
    done: list[str] = []

    async def one(i: int) -> None:
        out = await sup.call("benchpack", "benchpack/sleep", f"s{i}", {"seconds": seconds}, {})
        done.append(out["text"].value.text)

    t = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for i in range(count):
            tg.start_soon(one, i)
    wall = time.perf_counter() - t
    assert done == [f"slept {seconds}"] * count, done
    return wall


async def serve_figures(settings: Any, db: Path) -> dict[str, float]:
    """Deployments of ``benchpack`` on Ray Serve: the wall time of the sleeps at once with 2
    replicas and with 1 (and how long each took to deploy), then the noop's median µs."""
    from inline_host import Engine
    from inline_host.runs import DeploymentService, RunStore

    figures: dict[str, float] = {}
    store = RunStore(db)
    async with Engine.open(settings) as engine, anyio.create_task_group() as tg:
        service = DeploymentService(engine, store)
        await service.start(tg)
        for replicas in (2, 1):
            name = f"sleep{replicas}"
            t = time.perf_counter()
            await service.create(
                {"node": "benchpack/sleep", "replicas": replicas, "max_per_node": 1, "name": name}
            )
            view = await service.until_ready(name, 600)
            if view is None or view.state != "ready":
                raise RuntimeError(f"Serve deployment {name} is not ready: {view}")
            figures[f"deploy_{replicas}_s"] = time.perf_counter() - t
            for _ in range(2):  # warm: the handle's router, and a call on every replica
                await _at_once(engine, replicas, 0.2)
            figures[f"wall_{replicas}_s"] = await _at_once(engine, SLEEPS, SLEEP_S)
            if replicas == 2:  # one deployment a pack: the 1-replica one comes next
                assert await service.delete(name)
        # the noop through the deployment of 1 replica (its replicas serve all the pack's nodes)
        sup = engine.supervisor
        for i in range(SERVE_WARMUP):
            await sup.call("benchpack", "benchpack/noop", "n", {"n": i}, {})
        samples = []
        for i in range(SERVE_CALLS):
            t_ns = time.perf_counter_ns()
            await sup.call("benchpack", "benchpack/noop", "n", {"n": i}, {})
            samples.append((time.perf_counter_ns() - t_ns) / 1000)
        figures["per_call_us"] = median(samples)
        assert await service.delete("sleep1")
        tg.cancel_scope.cancel()
    store.close()
    return figures


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
        serve = anyio.run(serve_figures, ray_settings, Path(tmp) / "serve" / "inline.db")
        ray.shutdown()
    print(
        f"serve: {SLEEPS} sleeps of {SLEEP_S} s at once: {serve['wall_1_s']:.2f} s on 1 replica, "
        f"{serve['wall_2_s']:.2f} s on 2; deployed in {serve['deploy_1_s']:.1f} s (1 replica), "
        f"{serve['deploy_2_s']:.1f} s (2)"
    )
    write_result(
        "ray",
        {
            "per_call_us": round(ray_us, 1),
            "local_per_call_us": round(local_us, 1),
            "ratio": round(ray_us / local_us, 2),
            "cold_start_s": round(median(ray_cold), 3),
            "serve_throughput_ratio": round(serve["wall_1_s"] / serve["wall_2_s"], 2),
            "serve_per_call_us": round(serve["per_call_us"], 1),
            "serve_per_call_ratio": round(serve["per_call_us"] / local_us, 2),
            "local_cold_start_s": round(median(local_cold), 3),
            "join_s": round(join_s, 3),
            "calls": CALLS,
        },
    )


if __name__ == "__main__":
    main()
