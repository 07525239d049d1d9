"""Worker pools: a pack served by two replicas against one.

Eight runs of ``benchpack/sleep`` (a node that holds its worker for 1 s; ``concurrency`` 1, so a
replica takes one call at a time) are submitted at once, through the whole engine, with the
pack's pool at one replica and then at two (both warm: each replica started and served a call
before the clock starts). Two replicas should take about half the time.

Then eight tiny Z-Image renders at once (the random model the tests build, 256x256, 4 steps,
unbatched; one thread per worker, ``OMP_NUM_THREADS=1``), with the ``zimage`` pool at one
replica and at two: CPU-bound work, so on 2 cores two replicas can at best halve it.

Writes bench/results/pool.json: ``one_replica_s``, ``two_replicas_s``, ``throughput_ratio``
(one over two; target >= 1.8), ``render_one_replica_s``, ``render_two_replicas_s`` and
``render_ratio`` (target >= 1.4 on 2 cores).
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
from _common import bench_settings, tiny_zimage, write_result, zimage_python

RUNS = 8
SECONDS = 1.0


def sleep_run(seconds: float) -> dict[str, Any]:
    node = {"id": "s", "type": "benchpack/sleep", "params": {"seconds": seconds}}
    return {"graph": {"schemaVersion": 1, "nodes": [node]}, "target": "s"}


async def all_at_once(engine: Any, docs: list[dict[str, Any]]) -> float:
    """Seconds until every run of ``docs`` (each its own params: no cache hit) has ended."""
    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for doc in docs:
            tg.start_soon(engine.run, doc)
    return time.perf_counter() - started


def sleeps(seconds: list[float]) -> list[dict[str, Any]]:
    return [sleep_run(s) for s in seconds]


def renders(seeds: list[int]) -> list[dict[str, Any]]:
    return [render_run(s) for s in seeds]


async def measure() -> dict[str, float]:
    from inline_host import Engine

    async with Engine.open(bench_settings()) as engine:
        sup = engine.supervisor
        nonce = time.time_ns() % 1_000_000 * 1e-9  # runs of an earlier bench are cached
        await all_at_once(engine, sleeps([0.01 + nonce]))  # one replica, warm
        one = await all_at_once(engine, sleeps([SECONDS + nonce + i * 1e-6 for i in range(RUNS)]))
        sup.set_replicas("benchpack", 2)
        await all_at_once(engine, sleeps([0.2 + nonce + i * 1e-6 for i in range(2)]))  # both warm
        assert len(sup.pool("benchpack")) == 2, "the second replica did not start"
        later = nonce + 1e-3  # other params than the first round's
        two = await all_at_once(engine, sleeps([SECONDS + later + i * 1e-6 for i in range(RUNS)]))
    return {"one": one, "two": two}


def render_run(seed: int) -> dict[str, Any]:
    params = {"width": 256, "height": 256, "steps": 4, "seed": seed}
    return {
        "graph": {"schemaVersion": 1, "nodes": [
            {"id": "p", "type": "input/text", "params": {"text": "a red fox in snow"}},
            {"id": "z", "type": "alibaba/z-image-turbo", "params": params,
             "inputs": {"prompt": {"from": "p", "output": "text"}}},
        ]},
        "target": "z",
    }  # fmt: skip


async def measure_renders(settings: Any) -> dict[str, float]:
    from inline_host import Engine

    base = time.time_ns() % 1_000_000 * 1000  # seeds no earlier bench rendered
    async with Engine.open(settings) as engine:
        sup = engine.supervisor
        await all_at_once(engine, renders([base]))  # one replica, its model loaded
        one = await all_at_once(engine, renders([base + 1 + i for i in range(RUNS)]))
        sup.set_replicas("zimage", 2)
        await all_at_once(engine, renders([base + 100, base + 101]))  # both loaded
        assert len(sup.pool("zimage")) == 2, "the second replica did not start"
        two = await all_at_once(engine, renders([base + 200 + i for i in range(RUNS)]))
    return {"one": one, "two": two}


def render_half() -> dict[str, float]:
    """The render half, over a tiny Z-Image built with the zimage pack's own Python."""
    os.environ["OMP_NUM_THREADS"] = "1"  # the workers inherit it: one thread each
    os.environ["INLINE_MAX_BATCH"] = "1"  # each render its own call: the pool, not batching
    settings = bench_settings()
    with tempfile.TemporaryDirectory() as tmp:
        _, models = tiny_zimage(zimage_python(settings), Path(tmp))
        return anyio.run(measure_renders, replace(settings, models_dir=models))


def main() -> None:
    t = anyio.run(measure)
    r = render_half()
    write_result(
        "pool",
        {
            "one_replica_s": round(t["one"], 3),
            "two_replicas_s": round(t["two"], 3),
            "throughput_ratio": round(t["one"] / t["two"], 2),
            "runs": RUNS,
            "node_seconds": SECONDS,
            "target_throughput_ratio": 1.8,
            "render_one_replica_s": round(r["one"], 3),
            "render_two_replicas_s": round(r["two"], 3),
            "render_ratio": round(r["one"] / r["two"], 2),
            "target_render_ratio": 1.4,
        },
    )


if __name__ == "__main__":
    main()
