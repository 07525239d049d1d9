"""Per-node overhead of a trivial node through host -> worker -> host, vs an in-process call.

Writes bench/results/dispatch.json with ``per_node_us`` (median) and ``ratio_vs_inprocess``.
Target on a 2-core machine: per_node_us <= 150 (issue 23). ``per_node_uvloop_us`` is the same
on uvloop, the loop uvicorn runs the server on when it is installed.
"""

from __future__ import annotations

import sys
import time

import anyio
from _common import BENCH_PACKS, bench_settings, median, write_result

CALLS = 3000
WARMUP = 200


def inprocess_us() -> float:
    sys.path.insert(0, str(BENCH_PACKS[0] / "src"))
    from inline_benchpack import noop  # the same node, called directly

    params = noop.decode_params({"n": 1})
    samples = []
    for _ in range(CALLS):
        t = time.perf_counter_ns()
        noop.invoke(None, {}, noop.decode_params({"n": 1}))
        samples.append((time.perf_counter_ns() - t) / 1000)
    del params
    return median(samples)


async def through_workers() -> dict[str, float]:
    from inline_host import Engine

    async with Engine.open(bench_settings()) as engine:
        sup = engine.supervisor
        for i in range(WARMUP):
            await sup.call("benchpack", "benchpack/noop", "n", {"n": i}, {})
        samples = []
        for i in range(CALLS):
            t = time.perf_counter_ns()
            await sup.call("benchpack", "benchpack/noop", "n", {"n": i}, {})
            samples.append((time.perf_counter_ns() - t) / 1000)
        # the same through the whole engine: validation, planning, cache, scheduling
        runs = []
        for i in range(300):
            doc = {
                "graph": {
                    "schemaVersion": 1,
                    "nodes": [{"id": "n", "type": "benchpack/noop", "params": {"n": 10_000 + i}}],
                },
                "target": "n",
            }
            t = time.perf_counter_ns()
            await engine.run(doc)
            runs.append((time.perf_counter_ns() - t) / 1000)
    return {"per_node_us": median(samples), "engine_run_us": median(runs)}


def on_uvloop() -> float | None:
    """``per_node_us`` with the host on uvloop (None where uvloop is not installed)."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return None
    return anyio.run(through_workers, backend_options={"use_uvloop": True})["per_node_us"]


def main() -> None:
    base = inprocess_us()
    figures = anyio.run(through_workers)
    uv = on_uvloop()
    write_result(
        "dispatch",
        {
            "per_node_us": round(figures["per_node_us"], 1),
            "inprocess_us": round(base, 2),
            "ratio_vs_inprocess": round(figures["per_node_us"] / base, 1),
            "engine_run_us": round(figures["engine_run_us"], 1),
            "per_node_uvloop_us": None if uv is None else round(uv, 1),
            "calls": CALLS,
            "target_per_node_us": 150,
        },
    )


if __name__ == "__main__":
    main()
