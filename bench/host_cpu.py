"""The host path's cost: server CPU per trivial run, against a bare app doing the least a durable
run needs.

A trivial run is a one-node graph whose target is ``input/text`` (a new text each time, so no
run is a cache hit), two requests a run: ``POST /v1/runs``, then one ``GET /v1/runs/{id}``.
The CPU counted is the Inline server's whole process tree (the server, its pack workers, and
any child that exited meanwhile). The baseline, in the same run on the same machine, is a bare
Litestar app served by the same uvicorn that inserts one SQLite row on POST and reads it on GET
(WAL, ``synchronous=NORMAL``, as Inline's store), off the event loop as every server here must
(a worker thread per request, as Litestar's ``sync_to_thread``). Both are driven by one
keep-alive client each, one request at a time; both run at once and, once warm, take turns of
``CHUNK`` runs, so a machine whose speed drifts (a shared VM's neighbours) weighs on both alike.

Writes bench/results/host_cpu.json: ``cpu_ms_per_run``, ``baseline_cpu_ms_per_run`` and
``ratio`` (Inline over the baseline). Target on a 2-core machine: ratio <= 2.5.

Each run's text take is a new file, and what creating a file costs is the file system's: on a
journal-less ext4, for one, the kernel skips every inode deleted in the last minutes of the
folder's block group, one by one, so a file costs 20 us or 900 us by what was deleted nearby
lately. ``file_create_us`` (CPU per new file in the data dir's takes folder, measured after
the runs) says which kind of disk this run had. Both servers' data live under ``TMPDIR``
(``TMPDIR=/dev/shm`` measures the host path without the disk).
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
from _common import write_result

RUNS = 1000
WARMUP = 40
#: Runs a server makes in its turn (the two servers take turns until each made ``RUNS``).
CHUNK = 100
#: The bare app (run as ``python host_cpu.py --baseline PORT DB``).
BASELINE = "--baseline"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def baseline_app(db_path: str) -> Any:
    """The least a durable run needs: one row in on POST, one row out on GET, in a thread (no
    request may block the event loop)."""
    import secrets
    import sqlite3

    from litestar import Litestar, get, post
    from litestar.exceptions import NotFoundException

    db = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("CREATE TABLE IF NOT EXISTS runs (id TEXT PRIMARY KEY, request TEXT, status TEXT)")

    @post("/v1/runs", status_code=201, sync_to_thread=True)
    def submit(data: dict[str, Any]) -> dict[str, Any]:
        run_id = "run_" + secrets.token_hex(6)
        with db:
            db.execute("INSERT INTO runs VALUES (?, ?, 'done')", (run_id, json.dumps(data)))
        return {"runId": run_id, "status": "queued"}

    @get("/v1/runs/{run_id:str}", sync_to_thread=True)
    def status(run_id: str) -> dict[str, Any]:
        row = db.execute("SELECT id, status FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise NotFoundException()
        return {"runId": row[0], "status": row[1]}

    return Litestar([submit, status], debug=False)


def serve_baseline(port: int, db_path: str) -> None:
    import uvicorn

    uvicorn.run(baseline_app(db_path), host="127.0.0.1", port=port, log_level="warning")


def wait_ready(proc: subprocess.Popen[bytes], port: int, path: str) -> None:
    """Until ``path`` answers (bounded: a server that exits or takes 3 minutes fails)."""
    deadline = time.monotonic() + 180
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the server on port {port} exited ({proc.returncode})")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", path)
            if conn.getresponse().status < 500:
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the server on port {port} did not start")
        time.sleep(0.1)  # polling a starting server


def tree_cpu(pid: int) -> float:
    """Seconds of CPU of ``pid`` and every process under it (live ones, and reaped children)."""
    root = psutil.Process(pid)
    t = root.cpu_times()
    total = t.user + t.system + t.children_user + t.children_system
    for child in root.children(recursive=True):
        try:
            c = child.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += c.user + c.system
    return total


def file_create_us(folder: Path, count: int = 200) -> float:
    """CPU microseconds to create (and write a few bytes to) one new file in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    started = time.process_time()
    for i in range(count):
        fd = os.open(folder / f".probe-{i}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, b"probe")
        os.close(fd)
    return (time.process_time() - started) / count * 1e6


def doc(text: str) -> bytes:
    graph = {
        "schemaVersion": 1,
        "nodes": [{"id": "t", "type": "input/text", "params": {"text": text}}],
    }
    return json.dumps({"graph": graph, "target": "t"}).encode()


def one_run(conn: http.client.HTTPConnection, text: str) -> str:
    """Submit, then read the status once; the run id."""
    conn.request("POST", "/v1/runs", body=doc(text), headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    body = r.read()
    if r.status != 201:
        raise RuntimeError(f"submit answered {r.status}: {body[:300]!r}")
    run_id = json.loads(body)["runId"]
    conn.request("GET", f"/v1/runs/{run_id}")
    r = conn.getresponse()
    r.read()
    if r.status != 200:
        raise RuntimeError(f"status read answered {r.status}")
    return run_id


def settled(conn: http.client.HTTPConnection, run_id: str, done: set[str]) -> None:
    """Until run ``run_id`` ends (its status read again: runs end in order, and are quick)."""
    deadline = time.monotonic() + 120
    while True:
        conn.request("GET", f"/v1/runs/{run_id}")
        state = json.loads(conn.getresponse().read())
        if state["status"] in done:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"run {run_id} did not end: {state}")
        time.sleep(0.01)  # polling a run that is seconds at most from its end


class Server:
    """One server under test: its process tree, a keep-alive connection, its CPU so far."""

    def __init__(self, tag: str, proc: subprocess.Popen[bytes], port: int, *, runs: bool):
        self.tag, self.proc, self.port = tag, proc, port
        #: whether its runs go on after the submit answers (Inline's), to be waited for
        self.runs = runs
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.cpu_s = 0.0
        self.count = 0

    def warm(self) -> None:
        """Two rounds: what the first use sets off ends within the first (the pack's venv is
        built, packs.lock written) and is picked up in the second (the registry reloaded once),
        so the window measures runs only."""
        for round_ in range(2):
            last = ""
            for i in range(WARMUP):
                last = one_run(self.conn, f"{self.tag} warmup {round_} {i}")
            if self.runs:
                settled(self.conn, last, {"done"})

    def chunk(self, n: int) -> None:
        """``n`` runs, their CPU counted (a chunk ends once its last run has)."""
        before = tree_cpu(self.proc.pid)
        last = ""
        for _ in range(n):
            last = one_run(self.conn, f"{self.tag} run {self.count}")
            self.count += 1
        if self.runs:
            settled(self.conn, last, {"done"})
        self.cpu_s += tree_cpu(self.proc.pid) - before

    def ms_per_run(self) -> float:
        return self.cpu_s / self.count * 1000

    def stop(self) -> None:
        self.conn.close()
        self.proc.terminate()
        self.proc.wait(timeout=60)


def main() -> None:
    bench = Path(__file__).resolve().parent
    with tempfile.TemporaryDirectory(prefix="inline-host-cpu-") as tmp:
        port = free_port()
        env = dict(os.environ, INLINE_DATA_DIR=str(Path(tmp) / "data"), INLINE_PORT=str(port))
        env.pop("INLINE_TOKEN", None)
        inline_proc = subprocess.Popen(
            [sys.executable, "-m", "inline_host"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        bport = free_port()
        base_proc = subprocess.Popen(
            [sys.executable, str(bench / "host_cpu.py"), BASELINE, str(bport),
             str(Path(tmp) / "baseline.db")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        servers: list[Server] = []
        try:
            wait_ready(inline_proc, port, "/v1/health")
            servers.append(Server("inline", inline_proc, port, runs=True))
            wait_ready(base_proc, bport, "/v1/runs/none")
            servers.append(Server("baseline", base_proc, bport, runs=False))
            for server in servers:
                server.warm()
            # turns of CHUNK runs each: a machine whose load drifts weighs on both alike
            for _ in range(RUNS // CHUNK):
                for server in servers:
                    server.chunk(CHUNK)
        finally:
            for server in servers:
                server.stop()
            for proc in (inline_proc, base_proc):
                if proc.poll() is None:
                    proc.kill()
        inline, base = servers
        create_us = file_create_us(Path(tmp) / "data" / "takes")
    cpu_ms, base_ms = inline.ms_per_run(), base.ms_per_run()
    write_result(
        "host_cpu",
        {
            "cpu_ms_per_run": round(cpu_ms, 3),
            "baseline_cpu_ms_per_run": round(base_ms, 3),
            "ratio": round(cpu_ms / base_ms, 2),
            "runs": RUNS,
            "requests_per_run": 2,
            "target_ratio": 2.5,
            "file_create_us": round(create_us, 1),
        },
    )


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == BASELINE:
        serve_baseline(int(sys.argv[2]), sys.argv[3])
    else:
        main()
