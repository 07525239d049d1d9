"""Medium ones that need a restart (SIGTERM or kill -9), and the queue limit."""

from __future__ import annotations

import time
from pathlib import Path

from .conftest import finish, follow, one

SHM = Path("/dev/shm")


def test_a_client_run_id_retried_after_a_host_crash_is_a_replay(host, client):
    doc = one("chaos/surrogate", {"nonce": time.time_ns()}, clientRunId=f"c-{time.time_ns()}")
    first = finish(client, host.ws, doc)
    assert first["status"] == "done"
    host.restart(kill9=True)
    with host.client() as again:
        r = again.post("/v1/runs", json=doc)
        assert r.status_code == 200, r.text
        assert r.json()["runId"] == first["runId"]
        other = {**doc, "target": "n", "graph": one("chaos/surrogate", {"nonce": 1})["graph"]}
        assert again.post("/v1/runs", json=other).status_code == 409


def test_a_cancel_accepted_before_a_crash_stays_cancelled(host, client):
    run_id = client.post("/v1/runs", json=one("chaos/stubborn", {"nonce": time.time_ns()})).json()[
        "runId"
    ]
    assert follow(host.ws, run_id, {"progress"})["type"] == "progress"
    assert client.delete(f"/v1/runs/{run_id}").json()["status"] == "cancelled"
    host.restart(kill9=True)  # at once: before the call settles (grace 0.5 s)
    with host.client() as again:
        state = again.get(f"/v1/runs/{run_id}").json()
        assert state["status"] == "cancelled", state
        assert run_id not in {r["runId"] for r in again.get("/v1/runs").json()["runs"]}


def test_orphan_temp_files_in_the_blob_store_are_removed_at_start(host, client):
    state = finish(client, host.ws, one("chaos/surrogate", {"nonce": time.time_ns()}))
    png = {"Content-Type": "image/png"}
    upload = client.post("/v1/assets", content=b"\x89PNG\r\n\x1a\n" + bytes(32), headers=png)
    assert upload.status_code == 200, upload.text
    blob = host.data / "blobs" / "sha256"
    kept = next(p for p in blob.rglob("*") if p.is_file() and not p.name.startswith("."))
    host.stop()
    orphans = [
        blob / "ab" / ".tmp-crash1",
        blob / ".tmp-crash2",
        host.data / "takes" / ".t.png.tmp",
    ]
    for p in orphans:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"half")
    host.start()
    assert not any(p.exists() for p in orphans)
    assert kept.is_file() and state["status"] == "done"


def host_segments(pid: int) -> set[str]:
    return {p.name for p in SHM.glob(f"inline-{pid}-host-*")}


def worker_folders(pid: int, *, filled: bool = False) -> set[str]:
    """The ``/dev/shm`` folders of the host's sandboxed workers (``filled``: holding bytes)."""
    return {p.name for p in SHM.glob(f"inline-{pid}-*.shm-*") if not filled or any(p.iterdir())}


def restore_big_take(host, nonce: int) -> None:
    """Run a 16 MiB output once, restart, and run it again: the host restores it from its
    take into its own shared memory (over 8 MiB)."""
    doc = one("chaos/big", {"mib": 16, "nonce": nonce})
    with host.client() as c:
        assert finish(c, host.ws, doc)["status"] == "done"
    host.restart()
    with host.client() as c:
        assert finish(c, host.ws, doc)["status"] == "done"


def test_the_hosts_own_segment_goes_at_exit_and_a_killed_hosts_at_the_next_start(host):
    restore_big_take(host, 500 + time.time_ns() % 1000)
    pid = host.pid
    assert host_segments(pid), "the restored take should live in the host's shared memory"
    host.stop()
    assert host_segments(pid) == set()  # removed at exit
    assert not list(SHM.glob(f"inline-{pid}-*"))  # and its workers' folders
    host.start()
    restore_big_take(host, 1500 + time.time_ns() % 1000)
    with host.client() as c:  # a new output of a worker, which it left in shared memory
        sandboxed = c.get("/v1/health").json()["sandbox"]["active"]
        assert (
            finish(c, host.ws, one("chaos/big", {"mib": 16, "nonce": time.time_ns()}))["status"]
            == "done"
        )
    pid = host.pid
    assert host_segments(pid)
    assert bool(worker_folders(pid, filled=True)) == sandboxed  # a sandboxed worker's: its own
    host.stop(kill9=True)
    assert host_segments(pid)  # a kill -9 leaves it behind...
    assert bool(worker_folders(pid)) == sandboxed
    host.start()
    assert host_segments(pid) == set()  # ...and the next start removes it
    assert not list(SHM.glob(f"inline-{pid}-*"))  # the workers' folders too


def wait_running(client, run_ids: list[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        states = {r["runId"]: r["status"] for r in client.get("/v1/runs").json()["runs"]}
        if all(states.get(i) == "running" for i in run_ids):
            return
        assert time.monotonic() < deadline, states
        time.sleep(0.05)  # polling the queue of another process, bounded


def test_past_max_queued_a_submit_gets_429_with_retry_after(host, client):
    # INLINE_MAX_RUNS=2, INLINE_MAX_QUEUED=3
    base = time.time_ns()
    submit = [one("chaos/stubborn", {"nonce": base + i}) for i in range(6)]
    ids = [client.post("/v1/runs", json=submit[i]).json()["runId"] for i in range(2)]
    wait_running(client, ids)
    try:
        for i in range(2, 5):
            r = client.post("/v1/runs", json=submit[i])
            assert r.status_code == 201, r.text
            ids.append(r.json()["runId"])
        full = client.post("/v1/runs", json=submit[5])
        assert full.status_code == 429, full.text
        assert int(full.headers["Retry-After"]) >= 1
        assert "INLINE_MAX_QUEUED" in full.json()["error"]["message"]
    finally:
        for run_id in reversed(ids):
            client.delete(f"/v1/runs/{run_id}")
        for run_id in ids:
            follow(host.ws, run_id, set())
