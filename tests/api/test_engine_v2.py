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
            first = until(early, lambda m: m["type"] == "snapshot")
            # the twelfth word is the last before the gate
            seen = until(early, lambda m: m["type"] == "delta" and m["text"] == "w11 ")
            delta = next(m for m in seen if m["type"] == "delta")
            assert set(delta) == {"type", "runId", "nodeId", "output", "text"}
            assert delta["runId"] == run_id and delta["nodeId"] == "s" and delta["output"] == "text"
            with connect(f"{server.ws}/v1/runs/{run_id}/events") as late:
                snap = json.loads(late.recv(timeout=60))
                partial = snap["state"]["nodes"]["s"]["partial"]["text"]
                assert partial == words(12)  # held at the gate: exactly what was streamed
                assert snap["state"]["nodes"]["s"]["state"] == "running"
                gate.write_text("go")
                rest_late = until(late, lambda m: m["type"] == "run_done")
            rest_early = until(early, lambda m: m["type"] == "run_done")
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
            until(ws, lambda m: m["type"] == "delta" and m["text"] == "w4 ")
            c.delete(f"/v1/runs/{run_id}")
            tail = until(ws, lambda m: m["type"] == "cancelled")
        assert not [m for m in tail if m["type"] == "delta"]
        state = c.get(f"/v1/runs/{run_id}").json()
        assert state["status"] == "cancelled" and state["takes"] == []
        assert state["nodes"]["s"]["state"] == "cancelled" and "partial" not in state["nodes"]["s"]


def test_every_node_of_a_failed_run_tells_its_real_end(concurrent_server):
    server = concurrent_server
    doc = body(
        "j",
        node("t", "input/text", {"text": "x"}),
        node("f", "testpack/fail", {"message": "no luck"}),
        node("w", "testpack/sleep", {"seconds": 600}),
        node("k", "text/join", {}, a=("t", "text"), b=("w", "text")),
        node("j", "text/join", {}, a=("f", "text"), b=("k", "text")),
    )
    with server.client() as c:
        run_id = c.post("/v1/runs", json=doc).json()["runId"]
        msgs = events(server.ws, run_id)
        assert msgs[-1]["type"] == "error" and msgs[-1]["nodeId"] == "f"
        nodes = c.get(f"/v1/runs/{run_id}").json()["nodes"]
        assert {k: v["state"] for k, v in nodes.items()} == {
            "t": "done",
            "f": "error",
            "w": "cancelled",  # it was running when the failure ended the run
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
