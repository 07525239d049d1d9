"""Contract conformance, one test per row of CONTRACT.md's appendix A, against a live server."""

from __future__ import annotations

import hashlib
import json

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from ._helpers import body, echo_graph, events, node, run_to_end

CONTRACT_INPUT_TEXT = {
    "type": "input/text",
    "title": "Prompt",
    "category": "Input",
    "icon": "type",
    "source": "builtin",
    "outputKind": None,
    "inputs": [],
    "outputs": [{"id": "text", "label": "Text", "kind": "text", "required": False}],
    "params": [
        {"key": "text", "label": "Text", "widget": "textarea", "default": "", "kind": "text"}
    ],
    "hidden": True,
}


def image_graph(inputs, width=40, height=24, target="thumb"):
    return body(
        target,
        node("photo", "input/image", {"asset": {"ref": "path", "path": str(inputs / "red.png")}}),
        node("thumb", "image/resize", {"width": width, "height": height}, image=("photo", "image")),
    )


@pytest.fixture(scope="module")
def red_png(inputs):
    # a 2x2 PNG, written by hand so the host needs no imaging library
    import struct
    import zlib

    raw = b"".join(b"\x00" + b"\xff\x00\x00" * 2 for _ in range(2))

    def chunk(kind, data):
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        )

    png = (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )
    (inputs / "red.png").write_bytes(png)
    return png


# 1. routes and status codes ------------------------------------------------------------------
def test_1_routes_and_status_codes(client):
    assert client.get("/v1/health").status_code == 200
    assert client.get("/v1/models").status_code == 200
    r = client.get("/v1/models/input/text")
    assert r.status_code == 200 and r.json()["type"] == "input/text"
    r = client.get("/v1/models/acme/nope")
    assert r.status_code == 404
    assert r.json() == {"error": {"code": "not_found", "message": "Unknown node type 'acme/nope'."}}
    r = client.get("/v1/models/")
    assert r.status_code == 404 and r.json()["error"]["message"] == "Unknown node type ''."
    assert client.get("/v1/runs").status_code == 200
    r = client.get("/v1/runs/run_nope")
    assert (r.status_code, r.json()) == (
        404,
        {"error": {"code": "not_found", "message": "No run 'run_nope'."}},
    )
    r = client.delete("/v1/runs/run_nope")
    assert r.status_code == 404
    for path in ("/v1/takes/nope", "/v1/takes/nope/bytes"):
        r = client.get(path)
        assert (r.status_code, r.json()) == (
            404,
            {"error": {"code": "not_found", "message": "No take 'nope'."}},
        )
    # ours: the envelope, naming the route (the reference answers {"detail": "Not Found"})
    assert client.get("/v1/nothing-here").json() == {
        "error": {"code": "not_found", "message": "No route GET /v1/nothing-here."}
    }
    r = client.put("/v1/health")
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"
    r = client.post("/v1/runs", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request"
    # a body that does not say it is JSON is refused before it is read (issue 10)
    r = client.post("/v1/runs", content=b"{not json")
    assert r.status_code == 415 and r.json()["error"]["code"] == "unsupported_media_type"
    r = client.post("/v1/runs", json=[1, 2])
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request"
    r = client.post("/v1/runs", json={"graph": {"schemaVersion": 1, "nodes": []}})
    assert r.json() == {"error": {"code": "invalid_request", "message": "'target' is required."}}


# 2. camelCase, omitted optionals, always-present nullable keys ---------------------------------
def test_2_key_style_and_presence(client, server):
    d = client.get("/v1/models/input/text").json()
    assert {k: d[k] for k in CONTRACT_INPUT_TEXT} == CONTRACT_INPUT_TEXT
    assert list(d)[:10] == [*list(CONTRACT_INPUT_TEXT)[:9], "hidden"]
    resize = client.get("/v1/models/image/resize").json()
    assert resize["outputKind"] == "image" and "hidden" not in resize
    state = run_to_end(client, server.ws, echo_graph("keys"))
    assert list(state) == ["runId", "status", "target", "fraction", "nodes", "takes", "error"]
    assert state["error"] is None and state["status"] == "done" and state["fraction"] == 1.0
    assert state["nodes"]["t"] == {"state": "done", "fraction": 1.0}  # take-less, but done
    h = client.get("/v1/health").json()
    assert h["apiVersion"] == "v1" and h["schemaVersions"] == {"min": 1, "max": 1}
    assert {"kind", "profile", "vramBudgetMb", "vramFreeMb", "ramFreeMb"} <= set(h["device"])
    assert list(h)[:5] == ["ok", "apiVersion", "schemaVersions", "registryVersion", "device"]
    memory = h["memory"]  # the broker: budget per device, and per worker what it holds, with plans
    assert memory["profile"] == h["device"]["profile"] and memory["budget"]["cpu"]["bytes"] > 0
    assert all({"pack", "pid", "models"} <= set(w) for w in memory["workers"])


# 3. validation order, nodeId placement, all errors at once --------------------------------------
def test_3_validation_errors(client):
    r = client.post(
        "/v1/runs",
        json=body("j", node("j", "text/join", {}, a=("ghost", "text"), b=("ghost", "text"))),
    )
    assert r.status_code == 422
    err = r.json()["error"]
    assert err["code"] == "invalid_graph"
    assert (err["message"], err["nodeId"]) == ("No node with id 'ghost'.", "ghost")
    r = client.post(
        "/v1/runs",
        json=body(
            "r",
            node("t", "input/text", {"text": 3}),
            node("u", "acme/unknown"),
            node("r", "image/resize", {"width": 0}, image=("t", "text")),
        ),
    )
    err = r.json()["error"]
    assert err["message"] == "Unknown node type 'acme/unknown'." and err["nodeId"] == "u"
    paths = {e["path"] for e in err["errors"]}
    assert {
        "$.graph.nodes[0].params.text",
        "$.graph.nodes[2].params.width",
        "$.graph.nodes[2].inputs.image",
    } <= paths
    width = next(e for e in err["errors"] if e["path"].endswith("width"))
    assert width["nodeId"] == "r" and width["got"] == 0 and "1" in width["expected"]
    r = client.post("/v1/runs", json={"graph": {"schemaVersion": 2, "nodes": []}, "target": "x"})
    assert r.json()["error"]["message"] == "Unsupported graph schemaVersion: 2."
    assert "nodeId" not in r.json()["error"]


# 4. registryVersion and ETag / 304 -------------------------------------------------------------
def test_4_registry_version_etag(client, server):
    r = client.get("/v1/models")
    version = r.json()["registryVersion"]
    assert r.headers["etag"] == f'"{version}"' and version.startswith("r_")
    assert client.get("/v1/health").json()["registryVersion"] == version
    again = client.get("/v1/models", headers={"If-None-Match": f'"{version}"'})
    assert again.status_code == 304 and again.content == b"" and "etag" not in again.headers
    assert client.get("/v1/models", headers={"If-None-Match": '"r_other"'}).status_code == 200
    # installing a model file changes what /v1/models could serve, so the version changes
    (server.data_dir / "models" / "vae" / "tiny.safetensors").write_bytes(b"x")
    assert client.get("/v1/models").json()["registryVersion"] != version


# 5. clientRunId: 201 new, 200 replay, 409 conflict ----------------------------------------------
def test_5_client_run_id(client):
    doc = echo_graph("idempotent") | {"clientRunId": "script-0001"}
    first = client.post("/v1/runs", json=doc)
    assert first.status_code == 201
    again = client.post("/v1/runs", json=doc)
    assert again.status_code == 200 and again.json()["runId"] == first.json()["runId"]
    other = client.post("/v1/runs", json=echo_graph("different") | {"clientRunId": "script-0001"})
    assert other.status_code == 409
    assert other.json() == {
        "error": {
            "code": "conflict",
            "message": "clientRunId 'script-0001' was reused with a different graph.",
        }
    }


# 6. GET /v1/runs lists only unfinished runs with queue positions ----------------------------------
def test_6_live_queue(client, server):
    long = client.post("/v1/runs", json=body("w", node("w", "testpack/wait", {"seconds": 120})))
    q1 = client.post("/v1/runs", json=echo_graph("queued one"))
    q2 = client.post("/v1/runs", json=echo_graph("queued two"))
    ids = [r.json()["runId"] for r in (long, q1, q2)]
    with connect(f"{server.ws}/v1/runs/{ids[0]}/events") as ws:
        while json.loads(ws.recv(timeout=60))["type"] != "progress":
            pass
        runs = client.get("/v1/runs").json()["runs"]
        mine = [r for r in runs if r["runId"] in ids]
        assert [(r["runId"], r["status"], r["queuePosition"]) for r in mine] == [
            (ids[0], "running", None),
            (ids[1], "queued", 0),
            (ids[2], "queued", 1),
        ]
        assert set(mine[0]) == {"runId", "status", "target", "fraction", "queuePosition"}
        # ours: with a filter, newest first (the live ones with their live state)
        filtered = client.get("/v1/runs", params={"status": "queued,running"}).json()["runs"]
        assert [(r["runId"], r["status"], r["queuePosition"]) for r in filtered[:3]] == [
            (ids[2], "queued", 1),
            (ids[1], "queued", 0),
            (ids[0], "running", None),
        ]
        # cancelling a queued run settles it at once; the running one stops at its next check
        assert client.delete(f"/v1/runs/{ids[1]}").json() == {
            "runId": ids[1],
            "status": "cancelled",
        }
        assert client.get(f"/v1/runs/{ids[1]}").json()["status"] == "cancelled"
        client.delete(f"/v1/runs/{ids[0]}")
    events(server.ws, ids[2])
    assert client.get(f"/v1/runs/{ids[2]}").json()["status"] == "done"
    assert all(r["runId"] not in ids for r in client.get("/v1/runs").json()["runs"])
    assert client.get(f"/v1/runs/{ids[0]}").json()["status"] == "cancelled"
    # ours: finished runs too, by status=, newest first, at most limit=
    newest = client.get("/v1/runs", params={"limit": 3}).json()["runs"]
    assert [(r["runId"], r["status"]) for r in newest] == [
        (ids[2], "done"),
        (ids[1], "cancelled"),
        (ids[0], "cancelled"),
    ]
    assert newest[0]["fraction"] == 1.0 and newest[0]["queuePosition"] is None
    cancelled = client.get("/v1/runs", params={"status": "cancelled", "limit": 1000}).json()
    assert {ids[0], ids[1]} <= {r["runId"] for r in cancelled["runs"]}
    assert ids[2] not in {r["runId"] for r in cancelled["runs"]}
    assert all(r["status"] == "cancelled" for r in cancelled["runs"])
    for bad, named in ({"state": "done"}, "'state'"), ({"status": "finished"}, "'finished'"):
        r = client.get("/v1/runs", params=bad)
        assert r.status_code == 400 and named in r.json()["error"]["message"], r.text
    assert client.get("/v1/runs", params={"limit": 0}).status_code in (400, 422)


# 7. the events websocket -----------------------------------------------------------------------
def test_7_event_stream(client, server, red_png, tmp_path):
    gate = tmp_path / "subscribed"  # the node reports once the stream is subscribed
    spam = node("s", "testpack/spam", {"events": 300, "gate": str(gate)})
    r = client.post("/v1/runs", json=body("s", spam))
    msgs = events(server.ws, r.json()["runId"], on_snapshot=gate.touch)
    types = [m["type"] for m in msgs]
    assert types[0] == "snapshot" and msgs[0]["state"]["runId"] == r.json()["runId"]
    assert types[-1] == "run_done" and types.count("run_done") == 1
    assert "node_done" in types and types.index("node_done") < types.index("run_done")
    progress = [m for m in msgs if m["type"] == "progress"]
    assert 1 <= len(progress) < 300  # thinned to <= 10/s
    assert set(progress[0]) >= {"type", "runId", "nodeId", "phase", "fraction", "status"}
    # an unknown run: accepted, then closed with 4404 (the reference refuses the upgrade: 403)
    with (
        connect(f"{server.ws}/v1/runs/run_000000000000/events") as ws,
        pytest.raises(ConnectionClosed) as closed,
    ):
        ws.recv(timeout=30)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4404
    # a finished run: the snapshot, then a normal close
    after = events(server.ws, r.json()["runId"])
    assert [m["type"] for m in after] == ["snapshot"]
    assert after[0]["state"]["status"] == "done"


# 8. takes: immutable, hashed, Range, cache hits re-reported --------------------------------------
def test_8_takes(client, server, inputs, red_png):
    doc = image_graph(inputs)
    first = run_to_end(client, server.ws, doc)
    assert first["status"] == "done", first
    (take,) = first["takes"]
    # the contract's fields in its order, then ours: the output port and where the bytes are
    contract = ["id", "runId", "nodeId", "kind", "uri", "hash", "params", "createdAt"]
    assert list(take) == [*contract, "output", "url"]
    assert take["kind"] == "image" and take["nodeId"] == "thumb" and take["output"] == "image"
    assert take["url"] == f"/v1/takes/{take['id']}/bytes"
    assert client.get(take["url"]).content == client.get(f"/v1/takes/{take['id']}/bytes").content
    assert take["params"]["width"] == 40
    data = client.get(f"/v1/takes/{take['id']}/bytes")
    assert data.headers["content-type"] == "image/png" and data.headers["accept-ranges"] == "bytes"
    assert "sha256-" + hashlib.sha256(data.content).hexdigest() == take["hash"]
    assert b"inline" in data.content[:400]  # the recipe rides in the PNG
    part = client.get(f"/v1/takes/{take['id']}/bytes", headers={"Range": "bytes=0-7"})
    assert part.status_code == 206 and part.content == b"\x89PNG\r\n\x1a\n"
    assert part.headers["content-range"] == f"bytes 0-7/{len(data.content)}"
    assert client.get(f"/v1/takes/{take['id']}").json() == take
    second = run_to_end(client, server.ws, doc)
    assert second["takes"] == [take] and second["nodes"]["thumb"]["state"] == "cached"
    msgs = events(server.ws, second["runId"])
    assert msgs[0]["state"]["takes"][0]["runId"] == first["runId"]
    history = client.get("/v1/takes", params={"nodeId": "thumb"}).json()["takes"]
    assert history[0]["id"] == take["id"]


# 9. assets -------------------------------------------------------------------------------------
def test_9_assets(client, server, red_png):
    r = client.post("/v1/assets", content=red_png, headers={"Content-Type": "image/png"})
    assert r.status_code == 200
    asset = r.json()
    assert asset == {
        "id": "sha256-" + hashlib.sha256(red_png).hexdigest(),
        "kind": "image",
        "bytes": len(red_png),
    }
    assert client.post("/v1/assets", content=red_png).json()["id"] == asset["id"]
    # ours (issue 11): the kind comes from the bytes; what is no media file is refused (415)
    mp4 = b"\x00\x00\x00\x18ftypisom" + bytes(16)
    r = client.post("/v1/assets", content=mp4, headers={"Content-Type": "image/png"})
    assert r.json()["kind"] == "video"
    wav = b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(32)
    assert client.post("/v1/assets", content=wav).json()["kind"] == "audio"
    r = client.post("/v1/assets", content=b"abcd", headers={"Content-Type": "application/zip"})
    assert r.status_code == 415 and r.json()["error"]["code"] == "unsupported_media"
    # unlike the reference, an uploaded asset really feeds a graph
    state = run_to_end(
        client,
        server.ws,
        body(
            "r",
            node("i", "input/image", {"asset": {"ref": "asset", "id": asset["id"]}}),
            node("r", "image/resize", {"width": 3, "height": 3}, image=("i", "image")),
        ),
    )
    assert state["status"] == "done", state


# 10. persistence (restart behaviour is covered in test_durability.py) ---------------------------
def test_10_finished_runs_are_persisted(client, server):
    state = run_to_end(client, server.ws, echo_graph("persist"))
    import sqlite3

    db = sqlite3.connect(server.data_dir / "inline.db")
    (status,) = db.execute("SELECT status FROM runs WHERE run_id = ?", (state["runId"],)).fetchone()
    assert status == "done"


def test_runtime_failure_reports_node_and_message(client, server):
    state = run_to_end(
        client, server.ws, body("f", node("f", "testpack/fail", {"message": "it broke"}))
    )
    assert state["status"] == "error"
    assert state["error"] == {"nodeId": "f", "message": "it broke"}
    bad = run_to_end(client, server.ws, body("i", node("i", "input/image")))
    assert bad["error"]["message"] == "An image input node needs a valid asset reference."
