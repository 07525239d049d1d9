"""The /v1 API under load: 50 concurrent clients submitting a cached graph for 30 s, and the
delay from a worker's progress event to a websocket client.

Writes bench/results/api.json: ``runs_per_s``, ``p50_ms``, ``p99_ms`` (submit -> done), and
``event_p50_ms``, ``event_p99_ms``. Targets on a 2-core machine: >= 300 runs/s; event p99 <= 20 ms.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from _common import BENCH_PACKS, write_result
from websockets.asyncio.client import connect

CLIENTS = 50
SECONDS = 30.0
GRAPH = {
    "graph": {
        "schemaVersion": 1,
        "nodes": [
            {"id": "t", "type": "input/text", "params": {"text": "cached"}},
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


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def start_server(data: Path) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(
        os.environ,
        INLINE_DATA_DIR=str(data),
        INLINE_PORT=str(port),
        INLINE_PACK_PATHS=os.pathsep.join(str(p) for p in BENCH_PACKS),
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "inline_host"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(1800):
        try:
            if httpx.get(url + "/v1/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError("server did not start")


class Connection:
    """A minimal HTTP/1.1 keep-alive client (httpx costs more CPU than the server it loads)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        status_line = await self.reader.readline()
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        return int(status_line.split()[1]), await self.reader.readexactly(length)


async def load(url: str) -> dict[str, float]:
    latencies: list[float] = []
    host, port = url.removeprefix("http://").split(":")
    payload = json.dumps(GRAPH).encode()
    # warm: the first run computes, every later one is served from the cache
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        first = (await client.post("/v1/runs", json=GRAPH)).json()["runId"]
        while (await client.get(f"/v1/runs/{first}")).json()["status"] != "done":
            await asyncio.sleep(0.01)
    deadline = time.perf_counter() + SECONDS

    async def one_client() -> None:
        conn = Connection(host, int(port))
        while time.perf_counter() < deadline:
            t = time.perf_counter()
            code, raw = await conn.request("POST", "/v1/runs", payload)
            assert code in (200, 201), raw
            run = json.loads(raw)
            status = run["status"]
            while status not in ("done", "error", "cancelled"):
                _, raw = await conn.request("GET", f"/v1/runs/{run['runId']}")
                status = json.loads(raw)["status"]
            latencies.append((time.perf_counter() - t) * 1000)

    started = time.perf_counter()
    await asyncio.gather(*(one_client() for _ in range(CLIENTS)))
    elapsed = time.perf_counter() - started
    return {
        "runs_per_s": len(latencies) / elapsed,
        "p50_ms": pct(latencies, 0.5),
        "p99_ms": pct(latencies, 0.99),
        "runs": len(latencies),
    }


async def event_latency(url: str) -> dict[str, float]:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        doc = {
            "graph": {
                "schemaVersion": 1,
                "nodes": [
                    {
                        "id": "k",
                        "type": "benchpack/ticker",
                        "params": {"seconds": 15, "interval": 0.02},
                    }
                ],
            },
            "target": "k",
        }
        run_id = (await client.post("/v1/runs", json=doc)).json()["runId"]
    delays: list[float] = []
    ws_url = url.replace("http", "ws") + f"/v1/runs/{run_id}/events"
    async with connect(ws_url, max_size=None) as ws:
        async for raw in ws:
            now = time.time_ns()
            msg = json.loads(raw)
            if msg["type"] == "progress" and msg["status"].isdigit():
                delays.append((now - int(msg["status"])) / 1e6)
            if msg["type"] in ("run_done", "error", "cancelled"):
                break
    return {
        "event_p50_ms": pct(delays, 0.5),
        "event_p99_ms": pct(delays, 0.99),
        "events": len(delays),
    }


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_server(Path(tmp))
        try:
            figures = asyncio.run(load(url))
            figures |= asyncio.run(event_latency(url))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    write_result(
        "api",
        {
            "runs_per_s": round(figures["runs_per_s"], 1),
            "p50_ms": round(figures["p50_ms"], 2),
            "p99_ms": round(figures["p99_ms"], 2),
            "event_p50_ms": round(figures["event_p50_ms"], 2),
            "event_p99_ms": round(figures["event_p99_ms"], 2),
            "clients": CLIENTS,
            "seconds": SECONDS,
            "runs": figures["runs"],
            "events": figures["events"],
            "targets": {"runs_per_s": 300, "event_p99_ms": 20},
        },
    )


if __name__ == "__main__":
    main()
