"""Durability, security and slow readers, against real server processes."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time

import httpx
from websockets.sync.client import connect

from ._helpers import body, echo_graph, events, node
from .conftest import free_port, start_server


def test_kill9_with_five_runs_in_flight_then_all_finish_after_restart(tmp_path):
    data, inputs = tmp_path / "data", tmp_path / "inputs"
    inputs.mkdir()
    gate = tmp_path / "gate"
    server = start_server(data, inputs)

    def held(words: int) -> dict:  # streams one word, then holds until the gate file appears
        return node("s", "testpack/stream", {"words": words, "hold_after": 1, "gate": str(gate)})

    try:
        with server.client() as c:
            # one run makes a take first and then holds; four more hold too
            first = body(
                "e",
                node("a", "testpack/stream", {"words": 2}),
                held(3),
                node("e", "text/join", {}, a=("a", "text"), b=("s", "text")),
            )
            ids = [c.post("/v1/runs", json=first).json()["runId"]]
            for i in range(4):
                ids.append(c.post("/v1/runs", json=body("s", held(2 + i))).json()["runId"])
            wait_node_done(server.ws, ids[0], "a")
            statuses = {c.get(f"/v1/runs/{i}").json()["status"] for i in ids}
            assert statuses <= {"queued", "running"}
        server.kill9()
        gate.write_text("open")
        server = start_server(data, inputs)
        with server.client() as c:
            for run_id in ids:
                msgs = events(server.ws, run_id)
                assert msgs[-1]["type"] == "run_done" or msgs[0]["state"]["status"] == "done"
                state = c.get(f"/v1/runs/{run_id}").json()
                assert state["status"] == "done", state
        db = sqlite3.connect(data / "inline.db")
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        rows = db.execute("SELECT run_id, take_id FROM run_takes").fetchall()
        assert len(rows) == len(set(rows))
    finally:
        server.stop()


def wait_node_done(ws_url: str, run_id: str, node_id: str) -> dict:
    """Follow a run's events until ``node_id`` is announced done (or was, in the snapshot)."""
    with connect(f"{ws_url}/v1/runs/{run_id}/events", open_timeout=30) as ws:
        msg = json.loads(ws.recv(timeout=60))
        if msg["state"]["nodes"][node_id]["state"] in ("done", "cached"):
            return msg
        while not (msg["type"] == "node_done" and msg["nodeId"] == node_id):
            msg = json.loads(ws.recv(timeout=120))
            assert msg["type"] not in ("error", "cancelled"), msg
        return msg


def test_kill9_with_eight_concurrent_runs_and_two_queued_loses_and_repeats_nothing(tmp_path):
    data, inputs = tmp_path / "data", tmp_path / "inputs"
    inputs.mkdir()
    gate = tmp_path / "gate"
    server = start_server(data, inputs)  # INLINE_MAX_RUNS: the default, 8

    def doc(i: int) -> dict:
        # "a" makes a text take at once; "b" holds its run until the gate file appears
        return body(
            "j",
            node("a", "testpack/stream", {"words": i + 2}),
            node("b", "testpack/stream", {"words": 100 + i, "hold_after": 1, "gate": str(gate)}),
            node("j", "text/join", {}, a=("a", "text"), b=("b", "text")),
        )

    try:
        with server.client() as c:
            ids = [c.post("/v1/runs", json=doc(i)).json()["runId"] for i in range(10)]
            for run_id in ids[:8]:  # eight in flight at once, each with its first take made
                wait_node_done(server.ws, run_id, "a")
            live = {r["runId"]: r for r in c.get("/v1/runs").json()["runs"]}
            assert [live[i]["status"] for i in ids] == ["running"] * 8 + ["queued"] * 2
            assert [live[i]["queuePosition"] for i in ids[8:]] == [0, 1]
            before = {t["id"] for t in c.get("/v1/takes", params={"nodeId": "a"}).json()["takes"]}
            assert len(before) == 8
        server.kill9()
        gate.write_text("open")
        server = start_server(data, inputs)
        with server.client() as c:
            for i, run_id in enumerate(ids):
                events(server.ws, run_id)
                state = c.get(f"/v1/runs/{run_id}").json()
                assert state["status"] == "done", state
                texts = {
                    t["nodeId"]: c.get(f"/v1/takes/{t['id']}/bytes").text for t in state["takes"]
                }
                assert texts["a"].split() == [
                    f"wörd{k}" if k % 3 == 0 else f"w{k}" for k in range(i + 2)
                ]
                assert texts["j"] == texts["a"] + " " + texts["b"]  # joined by a space
            after = c.get("/v1/takes", params={"nodeId": "a", "limit": 100}).json()["takes"]
            assert len(after) == 10 and before <= {t["id"] for t in after}  # reused, not remade
        db = sqlite3.connect(data / "inline.db")
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        rows = db.execute("SELECT run_id, take_id FROM run_takes").fetchall()
        assert len(rows) == len(set(rows))
        (runs,) = db.execute("SELECT COUNT(*) FROM runs").fetchone()
        assert runs == 10
    finally:
        server.stop()


def test_a_take_made_before_a_crash_is_reused_not_made_again(tmp_path):
    data, inputs = tmp_path / "data", tmp_path / "inputs"
    inputs.mkdir()
    server = start_server(data, inputs)
    try:
        with server.client() as c:
            made = c.post("/v1/runs", json=body("p", node("p", "testpack/preview")))
            first = events(server.ws, made.json()["runId"])
            (take,) = first[-2]["takes"]
            server.kill9()
        server = start_server(data, inputs)
        with server.client() as c:
            again = c.post("/v1/runs", json=body("p", node("p", "testpack/preview"))).json()
            events(server.ws, again["runId"])
            state = c.get(f"/v1/runs/{again['runId']}").json()
            assert state["status"] == "done" and state["takes"] == [take]
            assert state["nodes"]["p"]["state"] == "cached"  # from the store, not made again
            assert len(c.get("/v1/takes", params={"nodeId": "p"}).json()["takes"]) == 1
    finally:
        server.stop()


def test_non_loopback_needs_a_token(tmp_path):
    data, inputs = tmp_path / "data", tmp_path / "inputs"
    inputs.mkdir()
    port = free_port()
    refused = start_server(data, inputs, {"INLINE_HOST": "0.0.0.0"}, port=port, wait=False)
    assert refused.proc.wait(timeout=60) != 0
    assert "requires a token" in refused.log.read_text()
    server = start_server(
        data,
        inputs,
        {"INLINE_HOST": "0.0.0.0", "INLINE_TOKEN": "s3cret"},
        port=free_port(),
        wait=False,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                r = httpx.get(server.url + "/v1/health", timeout=2)
                if r.status_code == 401:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
        ok = httpx.get(server.url + "/v1/health", headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200
        bad = httpx.get(server.url + "/v1/models", headers={"Authorization": "Bearer nope"})
        assert bad.status_code == 401
        run = httpx.post(
            server.url + "/v1/runs",
            json=echo_graph("auth"),
            headers={"Authorization": "Bearer s3cret"},
        ).json()["runId"]
        with connect(f"{server.ws}/v1/runs/{run}/events?token=s3cret") as ws:
            assert json.loads(ws.recv(timeout=30))["type"] == "snapshot"
    finally:
        server.stop()


def test_loopback_needs_no_token(client):
    assert client.get("/v1/health").status_code == 200


def test_a_subscriber_that_never_reads_does_not_stall_the_run(client, server):
    r = client.post("/v1/runs", json=body("s", node("s", "testpack/spam", {"events": 3000})))
    run_id = r.json()["runId"]
    with connect(f"{server.ws}/v1/runs/{run_id}/events", max_size=None) as stuck:
        # a second, attentive reader sees the run finish while the first reads nothing
        msgs = events(server.ws, run_id)
        assert msgs[-1]["type"] == "run_done"
        assert client.get(f"/v1/runs/{run_id}").json()["status"] == "done"
        # the stuck reader's backlog was coalesced, not queued event by event
        backlog = []
        while True:
            msg = json.loads(stuck.recv(timeout=30))
            backlog.append(msg["type"])
            if msg["type"] == "run_done":
                break
    assert backlog[0] == "snapshot" and backlog.count("progress") <= 40


def test_server_module_entry_point_help():
    out = subprocess.run(
        [sys.executable, "-m", "inline_host", "--help"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and "INLINE_PORT" in out.stdout


def test_finished_runs_leave_memory_but_stay_readable(tmp_path):
    import anyio
    from inline_host import Engine, Settings
    from inline_host.runs import RunService, RunStore

    async def scenario() -> None:
        settings = Settings.from_env(
            {
                "INLINE_SANDBOX_READ": os.environ.get("INLINE_SANDBOX_READ", ""),
                "INLINE_DATA_DIR": str(tmp_path / "data"),
            }
        )
        async with Engine.open(settings) as engine:
            service = RunService(engine, RunStore(settings.db_path), keep_finished=3)
            async with anyio.create_task_group() as tg:
                await service.start(tg)
                ids = []
                for i in range(6):
                    run_id, _, _ = await service.submit(
                        body("t", node("t", "input/text", {"text": f"t{i}"}), clientRunId=f"k{i}")
                    )
                    await service.runs[run_id].settled.wait()
                    ids.append(run_id)
                assert len([r for r in service.runs.values() if r.finished]) == 3
                assert all(service.state(i).status == "done" for i in ids)
                again = await service.submit(
                    body("t", node("t", "input/text", {"text": "t0"}), clientRunId="k0")
                )
                assert again == (ids[0], "done", False)  # replay survives eviction
                tg.cancel_scope.cancel()

    anyio.run(scenario)
