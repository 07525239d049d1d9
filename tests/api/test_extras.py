"""What we add over the contract: previews, coalescing, OpenAPI, limits."""

from __future__ import annotations

import json

import httpx
from websockets.sync.client import connect

from ._helpers import block_queue, body, events, node
from .conftest import start_server


def test_preview_events_carry_a_small_image(client, server):
    blocker = block_queue(client, server.ws)
    run_id = client.post(
        "/v1/runs", json=body("p", node("p", "testpack/preview"), clientRunId="preview-1")
    ).json()["runId"]
    with connect(f"{server.ws}/v1/runs/{run_id}/events") as ws:
        assert json.loads(ws.recv(timeout=30))["type"] == "snapshot"
        client.delete(f"/v1/runs/{blocker}")
        seen = []
        while not seen or seen[-1]["type"] not in ("run_done", "error"):
            seen.append(json.loads(ws.recv(timeout=60)))
    preview = next(m for m in seen if m["type"] == "preview")
    assert preview["nodeId"] == "p" and preview["image"].startswith("data:image/png;base64,")
    assert seen[0]["type"] == "run_started"


def test_identical_submissions_in_flight_attach_to_one_execution(concurrent_server, tmp_path):
    """On a server running eight runs at once, a twin submitted while the first is running
    (held by a gate) would execute again beside it if it were not attached: it must settle
    with the first's take, made once."""
    server = concurrent_server
    gate = tmp_path / "open"
    doc = body("twin", node("twin", "testpack/gate", {"file": str(gate), "tag": "twins"}))
    with server.client() as client:
        r = client.post("/v1/runs", json=doc)
        assert r.status_code == 201, r.text
        first = r.json()["runId"]
        with connect(f"{server.ws}/v1/runs/{first}/events") as ws:
            while (msg := json.loads(ws.recv(timeout=60)))["type"] != "progress":
                assert msg["type"] not in ("run_done", "error", "cancelled"), msg
        second = client.post("/v1/runs", json=doc).json()["runId"]
        assert first != second
        assert client.get(f"/v1/runs/{second}").json()["status"] == "queued"  # attached
        gate.touch()
        events(server.ws, first)
        events(server.ws, second)
        a = client.get(f"/v1/runs/{first}").json()
        b = client.get(f"/v1/runs/{second}").json()
        assert a["status"] == b["status"] == "done"
        assert a["takes"] == b["takes"] and len(a["takes"]) == 1
        assert b["nodes"]["twin"]["state"] == "cached"
        history = client.get("/v1/takes", params={"nodeId": "twin"}).json()["takes"]
        assert len(history) == 1  # made once


def test_twins_that_ran_no_longer_count_against_the_queue_limit(tmp_path, inputs):
    """With INLINE_MAX_QUEUED=2, two twins attached to a run in flight fill the queue; once
    they have run, the queue is empty again and new runs are accepted (the twins of a
    finished run no longer count as waiting)."""
    server = start_server(tmp_path / "data", inputs, {"INLINE_MAX_QUEUED": "2"})
    gate = tmp_path / "open"
    doc = body("twin", node("twin", "testpack/gate", {"file": str(gate), "tag": "full"}))
    try:
        with server.client() as client:
            first = client.post("/v1/runs", json=doc).json()["runId"]
            with connect(f"{server.ws}/v1/runs/{first}/events") as ws:
                while (msg := json.loads(ws.recv(timeout=60)))["type"] != "progress":
                    assert msg["type"] not in ("run_done", "error", "cancelled"), msg
            twins = [client.post("/v1/runs", json=doc) for _ in range(2)]
            assert [r.status_code for r in twins] == [201, 201], [r.text for r in twins]
            assert client.post("/v1/runs", json=doc).status_code == 429  # 2 are waiting
            gate.touch()
            for run_id in [first, *(r.json()["runId"] for r in twins)]:
                events(server.ws, run_id)
                assert client.get(f"/v1/runs/{run_id}").json()["status"] == "done"
            after = [
                client.post("/v1/runs", json=body("t", node("t", "input/text", {"text": t})))
                for t in ("a", "b")
            ]
            assert [r.status_code for r in after] == [201, 201], [r.text for r in after]
    finally:
        server.stop()


def test_openapi_is_published(client):
    spec = client.get("/schema/openapi.json").json()
    assert spec["openapi"].startswith("3.")
    assert {"/v1/runs", "/v1/health", "/v1/assets"} <= set(spec["paths"])


def test_oversized_uploads_are_refused(tmp_path):
    data, inputs = tmp_path / "data", tmp_path / "inputs"
    inputs.mkdir()
    server = start_server(data, inputs, {"INLINE_MAX_UPLOAD_MB": "0.01"})
    try:
        r = httpx.post(server.url + "/v1/assets", content=b"x" * 20_000, timeout=30)
        assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"
        png = b"\x89PNG\r\n\x1a\n" + bytes(992)  # a media file (by its bytes) under the cap
        ok = httpx.post(server.url + "/v1/assets", content=png, timeout=30)
        assert ok.status_code == 200
    finally:
        server.stop()


def test_a_model_file_added_while_serving_appears_in_pickers(client, server):
    def vae_options() -> list[str]:
        d = client.get("/v1/models/load/vae").json()
        (field,) = [p for p in d["params"] if p["key"] == "file"]
        return [o["value"] for o in field.get("options", [])]

    assert "fresh.safetensors" not in vae_options()
    folder = server.data_dir / "models" / "vae"
    (folder / "fresh.safetensors").write_bytes(b"\x08" + b"\x00" * 7 + b"{}      ")
    (folder / ".hidden.safetensors").write_bytes(b"x")
    (folder / "notes.txt").write_text("not a model")
    options = vae_options()
    assert "fresh.safetensors" in options
    assert ".hidden.safetensors" not in options and "notes.txt" not in options
