"""Streamed deltas: a node streams 2,000 pieces of text to a websocket reader.

Each piece carries the wall clock (ns) at which the worker produced it; the reader stamps its
arrival, so each delta's latency is produced-in-the-worker to received-by-the-client.

Two streams of 2,000 deltas: one paced at 1 kHz (ten times a fast LLM's token rate) for the
latency a reader sees, and one burst as fast as the node can call ``ctx.stream``, for the
throughput of the path (in a burst, latency is queueing: it grows with the burst).

Writes bench/results/stream.json: ``delta_p50_ms``, ``delta_p99_ms`` (paced; target p99 <=
20 ms), ``deltas_per_s`` (burst), ``burst_p99_ms``, and whether every stream's text equals its
take.
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

DELTAS = 2000


async def one_stream(url: str, gate: Path, interval_ms: float) -> dict[str, Any]:
    ws_url = url.replace("http://", "ws://")
    doc = {
        "graph": {
            "schemaVersion": 1,
            "nodes": [
                {
                    "id": "s",
                    "type": "benchpack/stream",
                    "params": {"deltas": DELTAS, "gate": str(gate), "interval_ms": interval_ms},
                }
            ],
        },
        "target": "s",
    }
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        run_id = (await client.post("/v1/runs", json=doc)).json()["runId"]
        latencies: list[float] = []
        arrivals: list[float] = []
        text = []
        async with connect(f"{ws_url}/v1/runs/{run_id}/events", max_size=None) as ws:
            first = json.loads(await ws.recv())
            assert first["type"] == "snapshot"
            gate.write_text("go")  # the reader is connected: start streaming
            async for raw in ws:
                now = time.time_ns()
                msg = json.loads(raw)
                if msg["type"] == "delta":
                    latencies.append((now - int(msg["text"])) / 1e6)
                    arrivals.append(time.perf_counter())
                    text.append(msg["text"])
                elif msg["type"] in ("run_done", "error", "cancelled"):
                    break
        state = (await client.get(f"/v1/runs/{run_id}")).json()
        take = state["takes"][0]["id"]
        final = (await client.get(f"/v1/takes/{take}/bytes")).text
    span = arrivals[-1] - arrivals[0] if len(arrivals) > 1 else 0.0
    return {
        "deltas": len(latencies),
        "delta_p50_ms": round(pct(latencies, 0.5), 3),
        "delta_p99_ms": round(pct(latencies, 0.99), 3),
        "deltas_per_s": round((len(arrivals) - 1) / span, 1) if span else None,
        "text_equals_take": "".join(text) == final,
    }


async def main_async(url: str, tmp: Path) -> dict[str, Any]:
    await one_stream(url, tmp / "warm", 0.0)  # the worker started, code paths warm
    paced = await one_stream(url, tmp / "paced", 1.0)
    burst = await one_stream(url, tmp / "burst", 0.0)
    return {
        "deltas": paced["deltas"],
        "delta_p50_ms": paced["delta_p50_ms"],
        "delta_p99_ms": paced["delta_p99_ms"],
        "deltas_per_s": burst["deltas_per_s"],
        "burst_p50_ms": burst["delta_p50_ms"],
        "burst_p99_ms": burst["delta_p99_ms"],
        "text_equals_take": paced["text_equals_take"] and burst["text_equals_take"],
    }


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_server(Path(tmp) / "data")
        try:
            figures = asyncio.run(main_async(url, Path(tmp)))
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    write_result("stream", figures)


if __name__ == "__main__":
    main()
