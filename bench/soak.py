"""The long chaos run: 16 clients and 4 websocket readers for N seconds, then worker churn.

Load: 16 clients submit runs (new ones that reach a worker, and cached ones) and 4 websocket
readers follow runs to their end, for ``--seconds`` (default 30). Churn: ``--kills`` cycles
(default 100) of a 16 MiB output from a fresh worker, that worker then killed (every fifth
cycle it is stopped as idle instead, by a Shutdown from the host).

Writes bench/results/soak.json: ``rss_start_mb``, ``rss_end_mb``, ``fds_start``, ``fds_end``,
``errors``, ``p99_ms`` (load), and ``churn_cycles``, ``churn_rss_baseline_mb``,
``churn_rss_end_mb``, ``churn_fds_baseline``, ``churn_fds_end``, ``dead_worker_segments``.
Targets: no errors; after churn, fds and RSS within 10 % of their baseline; no segment left.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import httpx
from _common import ROOT, write_result
from websockets.asyncio.client import connect

sys.path.insert(0, str(ROOT))
from tests.chaos.conftest import Host, one, proc_status

SHM = Path("/dev/shm")


def usage(pid: int) -> tuple[int, float]:
    """(open fds, RSS in MiB) of a process."""
    return len(os.listdir(f"/proc/{pid}/fd")), int(proc_status(pid)["VmRSS"].split()[0]) / 1024


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0.0


async def load(url: str, ws: str, seconds: float) -> dict[str, float | int]:
    latencies: list[float] = []
    errors: list[str] = []
    busy = 0
    stop = time.monotonic() + seconds
    counter = iter(range(10**9))

    async def client(i: int) -> None:
        nonlocal busy
        async with httpx.AsyncClient(base_url=url, timeout=60) as c:
            while time.monotonic() < stop:
                n = next(counter)
                nonce = n if n % 2 else i  # half new work, half cached
                t0 = time.perf_counter()
                try:
                    r = await c.post("/v1/runs", json=one("chaos/surrogate", {"nonce": nonce}))
                    if r.status_code == 429:
                        busy += 1
                        await asyncio.sleep(float(r.headers.get("Retry-After", "1")) / 10)
                        continue
                    if r.status_code not in (200, 201):
                        errors.append(f"{r.status_code} {r.text[:100]}")
                    latencies.append(time.perf_counter() - t0)
                except httpx.HTTPError as exc:
                    errors.append(repr(exc))

    async def reader(i: int) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60) as c:
            while time.monotonic() < stop:
                doc = one("chaos/surrogate", {"nonce": 10**8 + next(counter)})
                try:
                    run_id = (await c.post("/v1/runs", json=doc)).json()["runId"]
                    async with connect(f"{ws}/v1/runs/{run_id}/events") as sock:
                        async for raw in sock:
                            msg = json.loads(raw)
                            if msg["type"] in ("run_done", "error", "cancelled"):
                                if msg["type"] != "run_done":
                                    errors.append(f"run ended {msg['type']}")
                                break
                            if msg["type"] == "snapshot" and msg["state"]["status"] in (
                                "done",
                                "error",
                                "cancelled",
                            ):
                                break
                except Exception as exc:  # a reader that fails is an error of the run
                    errors.append(repr(exc))

    await asyncio.gather(*(client(i) for i in range(16)), *(reader(i) for i in range(4)))
    return {
        "requests": len(latencies),
        "errors": len(errors),
        "refused_busy": busy,
        "p99_ms": round(pct(latencies, 0.99) * 1000, 1),
        "p50_ms": round(pct(latencies, 0.5) * 1000, 1),
        "error_samples": errors[:5],  # type: ignore[dict-item]
    }


def churn_cycle(h: Host, c: httpx.Client, i: int) -> None:
    r = c.post("/v1/runs", json=one("chaos/big", {"mib": 16, "nonce": 10**6 + i}))
    run_id = r.json()["runId"]
    deadline = time.monotonic() + 120
    while c.get(f"/v1/runs/{run_id}").json()["status"] not in ("done", "error"):
        assert time.monotonic() < deadline, "run did not finish"
        time.sleep(0.02)
    w = c.get("/v1/health").json()["workers"].get("chaospack")
    if w is None:
        return
    if i % 5 == 4:
        deadline = time.monotonic() + 60  # idle stop (INLINE_WORKER_IDLE=1 here)
    else:
        os.kill(w["pid"], signal.SIGKILL)
        deadline = time.monotonic() + 30
    while c.get("/v1/health").json()["workers"].get("chaospack") is not None:
        assert time.monotonic() < deadline, "worker still listed"
        time.sleep(0.02)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--kills", type=int, default=100)
    args = ap.parse_args()
    root = Path(os.environ.get("CHAOS_DATA_DIR") or tempfile.mkdtemp(prefix="soak-"))
    (root / "inputs").mkdir(parents=True, exist_ok=True)
    env = {"INLINE_MAX_RUNS": "8", "INLINE_MAX_QUEUED": "1000", "INLINE_WORKER_IDLE": "1"}
    h = Host(root / "data", root / "inputs", env)
    try:
        fds0, rss0 = usage(h.pid)
        figures = asyncio.run(load(h.url, h.ws, args.seconds))
        fds1, rss1 = usage(h.pid)
        with h.client() as c:
            for i in range(3):
                churn_cycle(h, c, i)
            fds2, rss2 = usage(h.pid)
            for i in range(3, 3 + args.kills):
                churn_cycle(h, c, i)
            fds3, rss3 = usage(h.pid)
            current = c.get("/v1/health").json()["workers"].get("chaospack")
        live = f"inline-{h.pid}-chaospack-{current['generation']}-" if current else None
        dead = [
            p.name
            for p in SHM.glob(f"inline-{h.pid}-chaospack-*")
            if live is None or not p.name.startswith(live)
        ]
    finally:
        h.server.stop()
    write_result(
        "soak",
        {
            "seconds": args.seconds,
            "clients": 16,
            "ws_readers": 4,
            **figures,
            "rss_start_mb": round(rss0, 1),
            "rss_end_mb": round(rss1, 1),
            "fds_start": fds0,
            "fds_end": fds1,
            "churn_cycles": args.kills,
            "churn_rss_baseline_mb": round(rss2, 1),
            "churn_rss_end_mb": round(rss3, 1),
            "churn_fds_baseline": fds2,
            "churn_fds_end": fds3,
            "dead_worker_segments": len(dead),
        },
    )


if __name__ == "__main__":
    main()
