"""Limits that hold on the new surfaces: streamed text stops at the output cap, and params the
IPC wire cannot carry (huge text, integers beyond 64 bits) are refused at submit."""

from __future__ import annotations

import json

from websockets.sync.client import connect

from .conftest import Host, one

MIB = 1 << 20
#: The chaos host's INLINE_MAX_OUTPUT_MB.
CAP = 64 * MIB


def test_streamed_text_past_the_output_cap_fails_the_node_and_stops_at_the_cap(
    host: Host, client
) -> None:
    """96 pieces of 1 MiB against a 64 MiB cap: the node fails naming the cap, no reader is
    sent more than the cap, and the run's state never holds the stream past it."""
    doc = one("testpack/stream", {"words": 96, "piece_kib": 1024})
    r = client.post("/v1/runs", json=doc)
    assert r.status_code == 201, r.text
    run_id = r.json()["runId"]
    got, end = 0, None
    with connect(f"{host.ws}/v1/runs/{run_id}/events", open_timeout=30, max_size=None) as ws:
        while end is None:
            msg = json.loads(ws.recv(timeout=120))
            if msg["type"] == "delta":
                got += len(msg["text"])
            elif msg["type"] == "snapshot":
                partial = (msg["state"]["nodes"]["n"].get("partial") or {}).get("text", "")
                got += len(partial)
                if msg["state"]["status"] in ("done", "error", "cancelled"):
                    end = msg["state"]
            elif msg["type"] in ("run_done", "error", "cancelled"):
                end = msg
    assert got <= CAP, got / MIB
    state = client.get(f"/v1/runs/{run_id}").json()
    assert state["status"] == "error", state["status"]
    assert "INLINE_MAX_OUTPUT_MB" in state["error"]["message"], state["error"]
    assert state["error"]["nodeId"] == "n"
    assert state["nodes"]["n"]["state"] == "error"
    assert state["takes"] == []
    assert client.get("/v1/health").status_code == 200


def test_a_text_param_over_the_frame_limit_is_refused_at_submit(client) -> None:
    r = client.post("/v1/runs", json=one("testpack/stream", {"gate": "g" * (17 * MIB)}))
    assert r.status_code == 422, r.text[:500]
    error = r.json()["error"]
    assert error["nodeId"] == "n" and "a node call carries" in error["message"]
    assert error["errors"][0]["path"] == "$.graph.nodes[0].params"
    assert client.get("/v1/runs").status_code == 200


def test_integers_beyond_64_bits_are_refused_at_submit_naming_the_param(client) -> None:
    for value, shown in ((2**70, "2^70"), (-(2**64), "-2^64")):
        r = client.post("/v1/runs", json=one("chaos/surrogate", {"nonce": value}))
        assert r.status_code == 422, r.text
        error = r.json()["error"]
        assert error["nodeId"] == "n"
        assert f"nonce is {shown}, beyond the 64-bit integers" in error["message"]
        issue = error["errors"][0]
        assert issue["path"] == "$.graph.nodes[0].params.nonce"
        assert issue["expected"] == "an integer from -2^63 to 2^63-1"
    ok = client.post("/v1/runs", json=one("chaos/surrogate", {"nonce": 2**63 - 1}))
    assert ok.status_code in (200, 201), ok.text
