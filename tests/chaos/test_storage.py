"""High 3: a locked database never kills the run executor. A failed write ends that run with a
storage error, /v1/health says why, and service comes back by itself once the lock is gone.

The lock is real: another connection holds ``BEGIN EXCLUSIVE`` on the host's database, as a
second process would. The host waits its busy timeout (5 s) and then fails the write.
"""

from __future__ import annotations

import sqlite3
import time

from .conftest import finish, follow, one


def test_a_locked_database_fails_runs_cleanly_and_service_comes_back(host, client):
    running = client.post("/v1/runs", json=one("chaos/stubborn", {"nonce": time.time_ns()}))
    run_id = running.json()["runId"]
    assert follow(host.ws, run_id, {"progress"})["type"] == "progress"
    lock = sqlite3.connect(host.data / "inline.db", isolation_level=None, timeout=30)
    try:
        lock.execute("BEGIN EXCLUSIVE")
        # a new run cannot be stored: a clear 503, not a 500
        r = client.post("/v1/runs", json=one("chaos/surrogate", {"nonce": time.time_ns()}))
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "storage_failing" and r.headers["Retry-After"]
        health = client.get("/v1/health").json()
        assert health["ok"] is False and "storage" in health["reason"], health
        # a run whose end cannot be written ends with a storage error, the executor lives on
        assert client.delete(f"/v1/runs/{run_id}").status_code == 200
        ended = follow(host.ws, run_id, set(), timeout=60)
        assert ended["type"] in ("error", "snapshot"), ended
        state = client.get(f"/v1/runs/{run_id}").json()
        assert state["status"] == "error" and "stored" in state["error"]["message"], state
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    # by itself, with no restart: health is ok again and runs are accepted and run
    health = client.get("/v1/health").json()
    assert health["ok"] is True and health.get("reason") is None, health
    # and the end the store refused is written now: a restart will not resume that run
    with sqlite3.connect(host.data / "inline.db") as db:
        row = db.execute("SELECT status FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    assert row == ("error",), row
    for i in range(4):  # more runs than executors: none of them died
        state = finish(client, host.ws, one("chaos/surrogate", {"nonce": time.time_ns() + i}))
        assert state["status"] == "done", state


def test_the_store_has_a_busy_timeout(host):
    from inline_host.runs._store import RunStore

    store = RunStore(host.data / "probe.db")
    try:
        timeout = store._db.execute("PRAGMA busy_timeout").fetchone()[0]
    finally:
        store.close()
    assert timeout >= 1000
