"""Issue 11, what a newcomer meets over HTTP: each test is the request and what it answers."""

from __future__ import annotations

import struct
import zlib

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from ._helpers import body, node, run_to_end


def tiny_png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + data))
        return struct.pack(">I", len(data)) + kind + data + crc

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x00\x00")
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


# 1. params and node types ---------------------------------------------------------------------
def test_a_misspelled_param_is_a_422_that_suggests_the_declared_one(client):
    doc = body(
        "r",
        node("t", "input/text", {"text": "x"}),
        node("r", "image/resize", {"widht": 100}, image=("t", "text")),
    )
    r = client.post("/v1/runs", json=doc)
    assert r.status_code == 422
    err = r.json()["error"]
    paths = [e["path"] for e in err["errors"]]
    assert "$.graph.nodes[1].params.widht" in paths
    issue = next(e for e in err["errors"] if e["path"].endswith("widht"))
    assert issue == {
        "nodeId": "r",
        "path": "$.graph.nodes[1].params.widht",
        "message": "Unknown param 'widht' (at $.graph.nodes[1].params.widht). "
        "Did you mean 'width'?",
    }


def test_an_unknown_node_type_suggests_the_closest(client):
    r = client.post("/v1/runs", json=body("t", node("t", "input/txt", {"text": "x"})))
    assert r.status_code == 422
    err = r.json()["error"]
    assert (err["message"], err["nodeId"]) == (
        "Unknown node type 'input/txt'. Did you mean 'input/text'?",
        "t",
    )


def test_a_param_off_its_step_is_refused_naming_the_valid_neighbours(client, server):
    # alibaba/z-image-turbo's width moves in steps of 64 from 256; its venv is not needed for this
    doc = body(
        "z",
        node("p", "input/text", {"text": "a fox"}),
        node("z", "alibaba/z-image-turbo", {"width": 500}, prompt=("p", "text")),
    )
    r = client.post("/v1/runs", json=doc)
    assert r.status_code == 422
    err = r.json()["error"]
    assert err["message"] == (
        "Width ('width') moves in steps of 64 from 256 and 500 is not on one; the nearest valid "
        "values are 448 and 512 (at $.graph.nodes[1].params.width)"
    )
    assert (err["errors"][0]["expected"], err["errors"][0]["got"]) == (
        "a multiple of 64 from 256",
        500,
    )


# 4. /v1/models without building venvs ---------------------------------------------------------
def test_models_lists_every_pack_without_building_their_venvs(client, server):
    types = {m["type"] for m in client.get("/v1/models").json()["models"]}
    assert {"input/text", "sample", "alibaba/z-image-turbo", "testpack/echo"} <= types
    built = {p.parent.parent.name for p in (server.data_dir / "packs").glob("*/*/.ready")}
    assert not built & {"primitives", "zimage"}, built  # described, never built, by this server


# 3. assets ------------------------------------------------------------------------------------
def test_assets_kind_comes_from_the_bytes(client):
    r = client.post("/v1/assets", content=tiny_png(), headers={"content-type": "audio/wav"})
    assert r.status_code == 200 and r.json()["kind"] == "image"  # the bytes say, not the type
    wav = b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(32)
    assert client.post("/v1/assets", content=wav).json()["kind"] == "audio"
    mp4 = b"\x00\x00\x00\x18ftypisom" + bytes(16)
    assert client.post("/v1/assets", content=mp4).json()["kind"] == "video"


def test_assets_refuse_text_with_415_and_the_raw_file_hint(client):
    r = client.post("/v1/assets", content=b"just some words")
    assert r.status_code == 415
    err = r.json()["error"]
    assert err["code"] == "unsupported_media"
    assert "it looks like text" in err["message"] and "--data-binary @" in err["message"]


def test_assets_refuse_an_empty_body_with_400(client):
    r = client.post("/v1/assets", content=b"")
    assert r.status_code == 400
    assert r.json()["error"]["message"].startswith("The body is empty. Send the raw file")


def test_assets_unpack_a_multipart_body_with_one_file(client):
    png = tiny_png()
    r = client.post("/v1/assets", files={"file": ("red.png", png, "image/png")})  # curl -F
    assert r.status_code == 200
    assert r.json()["kind"] == "image" and r.json()["bytes"] == len(png)
    two = {"a": ("a.png", png, "image/png"), "b": ("b.png", png, "image/png")}
    r = client.post("/v1/assets", files=two)
    assert r.status_code == 415
    assert "exactly one file part (this one has 2)" in r.json()["error"]["message"]


# 5. errors that mislead -----------------------------------------------------------------------
def test_a_query_parameter_error_names_the_parameter(client):
    r = client.get("/v1/takes?limit=0")
    assert (r.status_code, r.json()) == (
        422,
        {
            "error": {
                "code": "invalid_request",
                "message": "Invalid query parameter 'limit': Expected `int` >= 1.",
            }
        },
    )
    r = client.get("/v1/fit")
    assert r.json()["error"]["message"] == "Missing required query parameter 'model'."


def test_unknown_routes_and_methods_answer_the_envelope(client):
    r = client.get("/v1/nothing-here")
    assert (r.status_code, r.json()) == (
        404,
        {"error": {"code": "not_found", "message": "No route GET /v1/nothing-here."}},
    )
    r = client.put("/v1/health")
    assert r.status_code == 405
    assert r.json()["error"]["code"] == "method_not_allowed"
    assert r.json()["error"]["message"].startswith("PUT is not allowed on /v1/health.")


def test_a_websocket_to_an_unknown_run_closes_with_4404(server):
    with (
        connect(f"{server.ws}/v1/runs/run_nope/events", open_timeout=30) as ws,
        pytest.raises(ConnectionClosed) as closed,
    ):
        ws.recv(timeout=30)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4404


def test_delete_on_a_finished_run_answers_its_real_status(client, server):
    state = run_to_end(client, server.ws, body("t", node("t", "input/text", {"text": "done"})))
    assert state["status"] == "done"
    r = client.delete(f"/v1/runs/{state['runId']}")
    assert (r.status_code, r.json()) == (200, {"runId": state["runId"], "status": "done"})


def test_a_bare_graph_is_told_what_the_envelope_is(client):
    bare = {"schemaVersion": 1, "nodes": [{"id": "t", "type": "input/text"}]}
    r = client.post("/v1/runs", json=bare)
    assert r.status_code == 422
    assert r.json()["error"]["message"] == (
        'This is a bare graph: a run request wraps it as {"graph": {"schemaVersion": 1, '
        '"nodes": [...]}, "target": "<node id>"}, where target is the node whose outputs you want.'
    )


# 10. the OpenAPI document ---------------------------------------------------------------------
def test_openapi_documents_the_run_request_and_every_answer(client):
    doc = client.get("/schema/openapi.json").json()
    submit = doc["paths"]["/v1/runs"]["post"]
    schema = submit["requestBody"]["content"]["application/json"]["schema"]
    assert schema["required"] == ["graph", "target"]
    graph = schema["properties"]["graph"]
    assert graph["required"] == ["schemaVersion", "nodes"]
    assert set(graph["properties"]["nodes"]["items"]["properties"]) == {
        "id",
        "type",
        "params",
        "inputs",
    }
    assert {"200", "201", "409", "422"} <= set(submit["responses"])
    models = doc["paths"]["/v1/models"]["get"]["responses"]
    assert models["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ModelListDoc"
    }
    assert "models" in doc["components"]["schemas"]["ModelListDoc"]["properties"]
    assert "404" in doc["paths"]["/v1/runs/{run_id}"]["get"]["responses"]
    assert "404" in doc["paths"]["/v1/takes/{take_id}"]["get"]["responses"]
    upload = doc["paths"]["/v1/assets"]["post"]
    assert upload["requestBody"]["content"]["application/octet-stream"]["schema"] == {
        "type": "string",
        "format": "binary",
    }
    assert {"400", "415"} <= set(upload["responses"])
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if isinstance(op, dict) and "responses" in op:
                assert op["responses"], (method, path)


def test_the_docs_pages_load_nothing_from_outside(client):
    for page in ("/schema", "/schema/swagger"):
        html = client.get(page).text
        assert "https://" not in html and "http://" not in html, page
    js = client.get("/schema-assets/redoc/bundles/redoc.standalone.js")
    assert js.status_code == 200 and len(js.content) > 100_000
    css = client.get("/schema-assets/swagger-ui-dist/swagger-ui.css")
    assert css.status_code == 200
