"""The long chaos run: 16 clients and 4 websocket readers for N seconds, then worker churn.

Load: 16 clients submit runs (new ones that reach a worker, and cached ones) and 4 websocket
readers follow runs to their end, for ``--seconds`` (default 30). Churn: ``--kills`` cycles
(default 100) of a 16 MiB output from a fresh worker, that worker then killed (every fifth
cycle it is stopped as idle instead, by a Shutdown from the host).

Slowloris, during the load: waves of ``SLOW_WAVE`` half-sent requests from ``SLOW_ADDRESSES``
loopback addresses (more per address than ``INLINE_MAX_CONNECTIONS_PER_CLIENT``): each must be
closed by the host (408 at the header deadline, or 429 past the cap) while the clients above
keep their latencies. Downloads, after churn: ``DOWNLOADS`` downloads from a fake hub whose
transfers stall, against ``INLINE_MAX_DOWNLOADS``: the host never runs more download children
than the cap, and every download ends done.

Writes bench/results/soak.json: ``rss_start_mb``, ``rss_end_mb``, ``fds_start``, ``fds_end``,
``errors``, ``p99_ms`` (load), ``slow_opened``, ``slow_408``, ``slow_429``, ``slow_reset``,
``slow_held``, ``churn_cycles``, ``churn_rss_baseline_mb``, ``churn_rss_end_mb``,
``churn_fds_baseline``, ``churn_fds_end``, ``dead_worker_segments``, ``downloads``,
``download_cap``, ``download_children_max``. Targets: no errors; no slow connection held past
its deadline; after churn, fds and RSS within 10 % of their baseline; no segment left; download
children never past the cap.
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
from typing import Any

import httpx
import psutil
from _common import ROOT, write_result
from websockets.asyncio.client import connect

sys.path.insert(0, str(ROOT))
from tests.chaos.conftest import Host, one, proc_status
from tests.hub._hub import ResumeHub

SHM = Path("/dev/shm")
#: Half-sent requests per slowloris wave, and the loopback addresses they come from.
SLOW_WAVE = 1100
SLOW_ADDRESSES = 10
HEADER_TIMEOUT = 2.0
#: Downloads started at once, and how many may run (INLINE_MAX_DOWNLOADS).
DOWNLOADS = 6
DOWNLOAD_CAP = 2
WEIGHTS = bytes(range(250)) * 32
CONFIG = json.dumps({"architectures": ["LlamaForCausalLM"]}).encode()


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


async def half_sent(port: int, source: str) -> bytes | None:
    """Open a connection from ``source``, send half a request line, and return what the host
    answers before it closes the connection (None: still open past the header deadline)."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    except OSError as exc:
        return repr(exc).encode()  # refused at connect: counted apart from 408 and 429
    try:
        writer.write(b"GET /v1/health HT")
        answer = await asyncio.wait_for(reader.read(), HEADER_TIMEOUT + 30)
    except TimeoutError:
        return None
    except ConnectionError:
        return b""
    finally:
        writer.close()
    return answer


async def slowloris(port: int, seconds: float) -> dict[str, int]:
    """Waves of ``SLOW_WAVE`` half-sent requests until ``seconds`` pass (one wave at least)."""
    statuses = dict.fromkeys(("slow_opened", "slow_408", "slow_429", "slow_reset", "slow_held"), 0)
    stop = time.monotonic() + seconds
    while True:
        sources = [f"127.0.1.{1 + i % SLOW_ADDRESSES}" for i in range(SLOW_WAVE)]
        answers = await asyncio.gather(*(half_sent(port, src) for src in sources))
        statuses["slow_opened"] += len(answers)
        for answer in answers:
            if answer is None:
                statuses["slow_held"] += 1
            elif answer.startswith(b"HTTP/1.1 408 "):
                statuses["slow_408"] += 1
            elif answer.startswith(b"HTTP/1.1 429 "):
                statuses["slow_429"] += 1
            else:  # closed with our bytes unread (a reset), or refused at connect
                statuses["slow_reset"] += 1
        if time.monotonic() >= stop:
            return statuses


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


def download_children(pid: int) -> int:
    """How many download children (``inline_host.hub._job``) the host runs now."""
    count = 0
    for child in psutil.Process(pid).children():
        try:
            count += "inline_host.hub._job" in child.cmdline()
        except psutil.NoSuchProcess:
            continue
    return count


def downloads_under_cap(h: Host, hub: ResumeHub) -> dict[str, int]:
    """``DOWNLOADS`` downloads whose first transfers stall: children never exceed the cap."""
    repos = [f"acme/soak{i}" for i in range(DOWNLOADS)]
    served = [hub.stall_at(f"{r}/model.safetensors", len(WEIGHTS) // 2) for r in repos]
    most = 0
    with h.client(headers={"Authorization": f"Bearer {h.operator_token()}"}) as c:
        ids = []
        for repo in repos:
            r = c.post("/v1/downloads", json={"source": f"hf:{repo}"})
            assert r.status_code == 202, r.text
            ids.append(r.json()["downloadId"])
        for event in served[:DOWNLOAD_CAP]:  # the first cap's worth reach their stall
            assert event.wait(120), "a download never asked for its weights"
        most = download_children(h.pid)
        hub.release.set()  # the stalled transfers drop; they resume, and the queue drains
        deadline = time.monotonic() + 180
        left = set(ids)
        while left:
            assert time.monotonic() < deadline, f"downloads still running: {sorted(left)}"
            most = max(most, download_children(h.pid))
            for download_id in sorted(left):
                state = c.get(f"/v1/downloads/{download_id}").json()["state"]
                assert state != "failed", f"download {download_id} failed"
                if state == "done":
                    left.discard(download_id)
            time.sleep(0.02)  # sampling another process's children, not synchronisation
    assert most <= DOWNLOAD_CAP, f"{most} download children against a cap of {DOWNLOAD_CAP}"
    return {"downloads": DOWNLOADS, "download_cap": DOWNLOAD_CAP, "download_children_max": most}


def hub_files() -> dict[str, bytes]:
    """The fake hub's repos: ``acme/soak<i>``, each a config and small weights."""
    files = {}
    for i in range(DOWNLOADS):
        files[f"acme/soak{i}/config.json"] = CONFIG
        files[f"acme/soak{i}/model.safetensors"] = WEIGHTS
    return files


def soak(args: argparse.Namespace, root: Path, hub: ResumeHub) -> dict[str, Any]:
    """Every phase against one host; the figures."""
    env = {
        "INLINE_MAX_RUNS": "8",
        "INLINE_MAX_QUEUED": "1000",
        "INLINE_WORKER_IDLE": "1",
        "INLINE_HEADER_TIMEOUT": str(HEADER_TIMEOUT),
        "INLINE_MAX_DOWNLOADS": str(DOWNLOAD_CAP),
        "HF_ENDPOINT": hub.url,
        "HF_HOME": str(root / "hf-home"),
        "HF_HUB_OFFLINE": "0",
        "HF_TOKEN": "",
    }
    h = Host(root / "data", root / "inputs", env)
    try:
        fds0, rss0 = usage(h.pid)

        async def loaded() -> tuple[dict[str, float | int], dict[str, int]]:
            slow = asyncio.create_task(slowloris(h.server.port, args.seconds))
            figures = await load(h.url, h.ws, args.seconds)
            return figures, await slow

        figures, slow = asyncio.run(loaded())
        assert slow["slow_held"] == 0, f"{slow['slow_held']} half-sent requests held open"
        fds1, rss1 = usage(h.pid)
        with h.client() as c:
            for i in range(3):
                churn_cycle(h, c, i)
            fds2, rss2 = usage(h.pid)
            for i in range(3, 3 + args.kills):
                churn_cycle(h, c, i)
            fds3, rss3 = usage(h.pid)
            current = c.get("/v1/health").json()["workers"].get("chaospack")
        fetched = downloads_under_cap(h, hub)
        live = f"inline-{h.pid}-chaospack-{current['generation']}-" if current else None
        dead = [
            p.name
            for p in SHM.glob(f"inline-{h.pid}-chaospack-*")
            if live is None or not p.name.startswith(live)
        ]
    finally:
        h.server.stop()
    return {
        "seconds": args.seconds,
        "clients": 16,
        "ws_readers": 4,
        **figures,
        **slow,
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
        **fetched,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--kills", type=int, default=100)
    args = ap.parse_args()
    root = Path(os.environ.get("CHAOS_DATA_DIR") or tempfile.mkdtemp(prefix="soak-"))
    (root / "inputs").mkdir(parents=True, exist_ok=True)
    with ResumeHub(hub_files()) as hub:
        figures = soak(args, root, hub)
    write_result("soak", figures)


if __name__ == "__main__":
    main()
