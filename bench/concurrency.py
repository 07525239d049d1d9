"""Concurrent runs: fast runs do not wait out a slow one.

One slow run (a node that sleeps 3 s) is in flight while 50 fast basics runs (``input/text`` ->
``text/join``, each its own text, so nothing is cached) are submitted after it. The fast runs'
latency (submit -> ``run_done`` seen on the events websocket) is measured with and without the
slow run, in one process against one server.

Writes bench/results/concurrency.json: ``fast_p50_ms``, ``fast_p99_ms`` (alone),
``fast_p50_with_slow_ms``, ``fast_p99_with_slow_ms`` and ``blocked_ratio`` (p99 with / p99
alone; target <= 1.5).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from _common import write_result
from api import pct, start_server
from websockets.asyncio.client import connect

FAST = 50
SLOW_SECONDS = 3.0


def fast_graph(tag: str) -> dict[str, Any]:
    return {
        "graph": {
            "schemaVersion": 1,
            "nodes": [
                {"id": "t", "type": "input/text", "params": {"text": tag}},
                {
                    "id": "j",
                    "type": "text/join",
                    "params": {"separator": "+"},
                    "inputs": {
                        "a": {"from": "t", "output": "text"},
                        "b": {"from": "t", "output": "text"},
                    },
                },
            ],
        },
        "target": "j",
    }


async def finish(ws_url: str, run_id: str) -> None:
    """Return once the run has ended (its snapshot says so, or its terminal event came)."""
    async with connect(f"{ws_url}/v1/runs/{run_id}/events") as ws:
        async for raw in ws:
            msg = json.loads(raw)
            if msg["type"] == "snapshot" and msg["state"]["status"] in ("done", "error"):
                return
            if msg["type"] in ("run_done", "error", "cancelled"):
                return


async def one_fast(client: httpx.AsyncClient, ws_url: str, tag: str) -> float:
    start = time.perf_counter()
    r = await client.post("/v1/runs", json=fast_graph(tag))
    r.raise_for_status()
    await finish(ws_url, r.json()["runId"])
    return (time.perf_counter() - start) * 1000


async def wave(client: httpx.AsyncClient, ws_url: str, label: str) -> list[float]:
    return list(
        await asyncio.gather(*(one_fast(client, ws_url, f"{label}-{i}") for i in range(FAST)))
    )


async def main_async(url: str) -> dict[str, Any]:
    ws_url = url.replace("http://", "ws://")
    limits = httpx.Limits(max_connections=FAST, max_keepalive_connections=FAST)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        await wave(client, ws_url, "warm")  # workers started, code paths warm
        alone = await wave(client, ws_url, "alone")
        slow_doc = {
            "graph": {
                "schemaVersion": 1,
                "nodes": [
                    {"id": "s", "type": "benchpack/sleep", "params": {"seconds": SLOW_SECONDS}}
                ],
            },
            "target": "s",
        }
        slow = (await client.post("/v1/runs", json=slow_doc)).json()["runId"]
        async with connect(f"{ws_url}/v1/runs/{slow}/events") as ws:
            async for raw in ws:  # the slow run is in flight before the fast ones come
                msg = json.loads(raw)
                if msg["type"] == "run_started" or (
                    msg["type"] == "snapshot" and msg["state"]["status"] == "running"
                ):
                    break
        with_slow = await wave(client, ws_url, "with-slow")
        slow_state = (await client.get(f"/v1/runs/{slow}")).json()["status"]
        await finish(ws_url, slow)
    return {
        "fast_runs": FAST,
        "slow_seconds": SLOW_SECONDS,
        "fast_p50_ms": round(pct(alone, 0.5), 1),
        "fast_p99_ms": round(pct(alone, 0.99), 1),
        "fast_p50_with_slow_ms": round(pct(with_slow, 0.5), 1),
        "fast_p99_with_slow_ms": round(pct(with_slow, 0.99), 1),
        "slow_still_running_after_fast": slow_state == "running",
        "blocked_ratio": round(pct(with_slow, 0.99) / pct(alone, 0.99), 3),
    }


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_server(Path(tmp))
        try:
            figures = asyncio.run(main_async(url))
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    write_result("concurrency", figures)


if __name__ == "__main__":
    main()
