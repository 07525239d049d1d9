"""Engine v2 through a real server: concurrent runs, text takes, streamed deltas, node states."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

from ._helpers import body, events, node


def words(n: int) -> str:
    """What ``testpack/stream`` streams for ``words=n``."""
    return "".join(f"w{i} " if i % 3 else f"wörd{i}\n" for i in range(n))


def until(ws: Any, predicate: Any) -> list[dict[str, Any]]:
    """Messages up to and including the first that satisfies ``predicate``."""
    seen = []
    while True:
        msg = json.loads(ws.recv(timeout=120))
        seen.append(msg)
        if predicate(msg):
            return seen
        assert msg["type"] not in ("run_done", "error", "cancelled") or predicate(msg), seen


def streamed_until(ws: Any, text: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Read a run's events until its node ``s`` has streamed ``text`` (the snapshot's partial
    text counts: the reader may connect after some deltas went out); the snapshot and the
    messages after it."""
    snapshot = json.loads(ws.recv(timeout=120))
    assert snapshot["type"] == "snapshot"
    got = snapshot["state"]["nodes"]["s"].get("partial", {}).get("text", "")
    seen: list[dict[str, Any]] = []
    while got != text:
        assert text.startswith(got), (got, text)
        msg = json.loads(ws.recv(timeout=120))
        seen.append(msg)
        if msg["type"] == "delta" and msg["nodeId"] == "s":
            got += msg["text"]
    return snapshot, seen


def test_a_slow_run_does_not_hold_back_a_fast_one(concurrent_server):
    server = concurrent_server
    with server.client() as c:
        slow = c.post("/v1/runs", json=body("s", node("s", "testpack/sleep", {"seconds": 600})))
        slow_id = slow.json()["runId"]
        with connect(f"{server.ws}/v1/runs/{slow_id}/events") as ws:
            until(ws, _running)
        fast = body(
            "j",
            node("a", "input/text", {"text": "fast"}),
            node("j", "text/join", {"separator": "-"}, a=("a", "text"), b=("a", "text")),
        )
        fast_id = c.post("/v1/runs", json=fast).json()["runId"]
        msgs = events(server.ws, fast_id)
        assert msgs[-1]["type"] == "run_done"
        assert c.get(f"/v1/runs/{slow_id}").json()["status"] == "running"
        assert c.delete(f"/v1/runs/{slow_id}").json()["status"] == "cancelled"
        events(server.ws, slow_id)  # to its end
        state = c.get(f"/v1/runs/{slow_id}").json()
        assert state["status"] == "cancelled" and state["nodes"]["s"]["state"] == "cancelled"


def test_a_text_target_is_a_take(concurrent_server, tmp_path):
    server = concurrent_server
    gate = tmp_path / "gate"
    doc = body(
        "j",
        node("a", "input/text", {"text": "café"}),
        node("g", "testpack/stream", {"words": 1, "hold_after": 0, "gate": str(gate)}),
        node("j", "text/join", {"separator": " & "}, a=("a", "text"), b=("g", "text")),
    )
    with server.client() as c:
        run_id = c.post("/v1/runs", json=doc).json()["runId"]
        with connect(f"{server.ws}/v1/runs/{run_id}/events") as ws:
            until(ws, lambda m: m["type"] == "snapshot")
            gate.write_text("go")  # held until we listen: no event passes unseen
            msgs = until(ws, lambda m: m["type"] == "run_done")
        done = [m for m in msgs if m["type"] == "node_done"]
        assert [m["nodeId"] for m in done] == ["g", "j"]  # g: output kind text; j: the target
        (take,) = done[-1]["takes"]
        assert take["kind"] == "text" and take["hash"].startswith("sha256-")
        assert not done[-1]["cached"]
        state = c.get(f"/v1/runs/{run_id}").json()
        assert [t["nodeId"] for t in state["takes"]] == ["g", "j"]
        assert {k: v["state"] for k, v in state["nodes"].items()} == dict.fromkeys("agj", "done")
        raw = c.get(f"/v1/takes/{take['id']}/bytes")
        assert raw.headers["content-type"] == "text/plain; charset=utf-8"
        assert raw.content.decode("utf-8") == "café & wörd0\n"
        history = c.get("/v1/takes", params={"nodeId": "j", "runId": run_id}).json()["takes"]
        assert [t["id"] for t in history] == [take["id"]]
        # the same graph again: the target is cached, re-reported with the same take
        again = c.post("/v1/runs", json=doc).json()["runId"]
        state = c.get(f"/v1/runs/{again}").json()
        assert state["status"] == "done" and state["takes"] == [take]
        assert state["nodes"]["j"]["state"] == "cached"
        assert state["nodes"]["a"]["state"] == state["nodes"]["g"]["state"] == "skipped"


def test_deltas_stream_and_a_late_reader_gets_what_came_before(concurrent_server, tmp_path):
    server = concurrent_server
    gate = tmp_path / "gate"
    doc = body(
        "s", node("s", "testpack/stream", {"words": 40, "hold_after": 12, "gate": str(gate)})
    )
    with server.client() as c:
        run_id = c.post("/v1/runs", json=doc).json()["runId"]
        with connect(f"{server.ws}/v1/runs/{run_id}/events") as early:
            first_snapshot, seen = streamed_until(early, words(12))  # held at the gate now
            first = [first_snapshot]
            with connect(f"{server.ws}/v1/runs/{run_id}/events") as late:
                snap = json.loads(late.recv(timeout=60))
                partial = snap["state"]["nodes"]["s"]["partial"]["text"]
                assert partial == words(12)  # held at the gate: exactly what was streamed
                assert snap["state"]["nodes"]["s"]["state"] == "running"
                gate.write_text("go")
                rest_late = until(late, lambda m: m["type"] == "run_done")
            rest_early = until(early, lambda m: m["type"] == "run_done")
        delta = next(m for m in rest_early if m["type"] == "delta")
        assert set(delta) == {"type", "runId", "nodeId", "output", "text"}
        assert delta["runId"] == run_id and delta["nodeId"] == "s" and delta["output"] == "text"
        state = c.get(f"/v1/runs/{run_id}").json()
        (take,) = state["takes"]
        final = c.get(f"/v1/takes/{take['id']}/bytes").content.decode()
        assert final == words(40)
        assert "partial" not in state["nodes"]["s"]
        late_text = partial + "".join(m["text"] for m in rest_late if m["type"] == "delta")
        assert late_text == final
        early_text = first[0]["state"]["nodes"]["s"].get("partial", {}).get("text", "") + "".join(
            m["text"] for m in seen + rest_early if m["type"] == "delta"
        )
        assert early_text == final


def test_cancel_stops_a_stream_between_deltas(concurrent_server, tmp_path):
    server = concurrent_server
    doc = body(
        "s",
        node("s", "testpack/stream", {"words": 30, "hold_after": 5, "gate": str(tmp_path / "no")}),
    )
    with server.client() as c:
        run_id = c.post("/v1/runs", json=doc).json()["runId"]
        with connect(f"{server.ws}/v1/runs/{run_id}/events") as ws:
            streamed_until(ws, words(5))  # held at a gate that never opens
            c.delete(f"/v1/runs/{run_id}")
            tail = until(ws, lambda m: m["type"] == "cancelled")
        assert not [m for m in tail if m["type"] == "delta"]
        state = c.get(f"/v1/runs/{run_id}").json()
        assert state["status"] == "cancelled" and state["takes"] == []
        assert state["nodes"]["s"]["state"] == "cancelled" and "partial" not in state["nodes"]["s"]


def test_every_node_of_a_failed_run_tells_its_real_end(concurrent_server, tmp_path):
    server = concurrent_server
    fail_now = tmp_path / "fail-now"
    doc = body(
        "j",
        node("t", "testpack/stream", {"words": 1}),
        node("f", "testpack/fail", {"message": "no luck", "after": str(fail_now)}),
        node("s", "testpack/stream", {"words": 3, "hold_after": 1, "gate": str(tmp_path / "no")}),
        node("k", "text/join", {}, a=("t", "text"), b=("s", "text")),
        node("j", "text/join", {}, a=("f", "text"), b=("k", "text")),
    )
    with server.client() as c:
        run_id = c.post("/v1/runs", json=doc).json()["runId"]
        with connect(f"{server.ws}/v1/runs/{run_id}/events") as ws:
            snapshot, seen = streamed_until(ws, words(1))  # s runs, held at a closed gate
            t_done = snapshot["state"]["nodes"]["t"]["state"] == "done" or any(
                m["type"] == "node_done" and m["nodeId"] == "t" for m in seen
            )
            if not t_done:  # t (a text take) is announced when it finishes
                until(ws, lambda m: m["type"] == "node_done" and m["nodeId"] == "t")
            fail_now.write_text("now")
            end = until(ws, lambda m: m["type"] in ("run_done", "error", "cancelled"))
        assert end[-1]["type"] == "error" and end[-1]["nodeId"] == "f"
        nodes = c.get(f"/v1/runs/{run_id}").json()["nodes"]
        assert {k: v["state"] for k, v in nodes.items()} == {
            "t": "done",
            "f": "error",
            "s": "cancelled",  # it was running when the failure ended the run
            "k": "skipped",  # upstream never finished
            "j": "skipped",
        }


def test_queue_positions_with_more_runs_than_executors(concurrent_server, tmp_path: Path):
    server = concurrent_server
    gate = tmp_path / "gate"

    def held(i: int) -> dict[str, Any]:
        params = {"words": 200 + i, "hold_after": 0, "gate": str(gate)}
        return body("s", node("s", "testpack/stream", params))

    with server.client() as c:
        ids = [c.post("/v1/runs", json=held(i)).json()["runId"] for i in range(11)]
        for run_id in ids[:8]:
            with connect(f"{server.ws}/v1/runs/{run_id}/events") as ws:
                until(ws, lambda m: m["type"] in ("run_started", "snapshot") and _running(m))
        mine = {r["runId"]: r for r in c.get("/v1/runs").json()["runs"]}
        assert [mine[i]["status"] for i in ids] == ["running"] * 8 + ["queued"] * 3
        assert [mine[i]["queuePosition"] for i in ids] == [None] * 8 + [0, 1, 2]
        health = c.get("/v1/health").json()["runs"]
        assert health["running"] == 8 and health["queued"] == 3 and health["maxRuns"] == 8
        c.delete(f"/v1/runs/{ids[8]}")
        mine = {r["runId"]: r for r in c.get("/v1/runs").json()["runs"]}
        assert [mine[i]["queuePosition"] for i in ids[9:]] == [0, 1]
        gate.write_text("go")
        for run_id in ids:
            events(server.ws, run_id)
        statuses = [c.get(f"/v1/runs/{i}").json()["status"] for i in ids]
        assert statuses == ["done"] * 8 + ["cancelled"] + ["done"] * 2


def _running(msg: dict[str, Any]) -> bool:
    if msg["type"] == "run_started":
        return True
    return msg["state"]["status"] == "running"


def test_identical_runs_in_flight_together_make_one_take(concurrent_server, tmp_path):
    server = concurrent_server
    gate = tmp_path / "gate"
    doc = body("s", node("s", "testpack/stream", {"words": 7, "hold_after": 2, "gate": str(gate)}))
    with server.client() as c:
        first = c.post("/v1/runs", json=doc).json()["runId"]
        with connect(f"{server.ws}/v1/runs/{first}/events") as ws:
            streamed_until(ws, words(2))  # in flight, held at its gate
        second = c.post("/v1/runs", json=doc).json()["runId"]  # while the first is in flight
        others = [c.post("/v1/runs", json=held_elsewhere(tmp_path, i)).json() for i in range(3)]
        gate.write_text("go")
        for run_id in (first, second, *(o["runId"] for o in others)):
            events(server.ws, run_id)
        a = c.get(f"/v1/runs/{first}").json()
        b = c.get(f"/v1/runs/{second}").json()
        assert a["status"] == b["status"] == "done"
        assert a["takes"] == b["takes"] and len(a["takes"]) == 1
        assert a["nodes"]["s"]["state"] == "done" and b["nodes"]["s"]["state"] == "cached"
        history = c.get("/v1/takes", params={"nodeId": "s", "limit": 100}).json()["takes"]
        assert sum(t["id"] == a["takes"][0]["id"] for t in history) == 1  # made once


def held_elsewhere(tmp_path: Path, i: int) -> dict[str, Any]:
    """Other runs in flight at the same time (their own texts)."""
    return body("s", node("s", "testpack/stream", {"words": 300 + i}))
