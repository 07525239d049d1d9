"""POST /v1/import/comfyui on a real server: JSON and PNG bodies, refusals, and a pack's mapping
(testpack's ``inline_comfyui_mappings``, carried in its handshake) run end to end."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "comfyui"


def test_a_ui_workflow_becomes_a_run_document(client: httpx.Client):
    body = (DATA / "z_image_turbo_example.ui.json").read_bytes()
    r = client.post(
        "/v1/import/comfyui", content=body, headers={"content-type": "application/json"}
    )
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["target"] == "8" and doc["graph"]["schemaVersion"] == 1
    assert doc["report"]["complete"] is True
    types = {n["type"] for n in doc["graph"]["nodes"]}
    assert {"load/diffusion-model", "sample", "vae/decode", "encode/text"} <= types


def test_a_png_body_and_the_one_click_node(client: httpx.Client):
    body = (DATA / "community" / "zimage_turbo_lora_dangling.embedded.png").read_bytes()
    r = client.post(
        "/v1/import/comfyui?oneClick=true", content=body, headers={"content-type": "image/png"}
    )
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["report"]["oneClick"] is True
    assert [n["type"] for n in doc["graph"]["nodes"]] == ["input/text", "alibaba/z-image-turbo"]
    lora = next(n for n in doc["report"]["nodes"] if n["classType"] == "LoraLoaderModelOnly")
    assert lora["status"] == "dropped" and "not upstream" in lora["reason"]


def test_not_a_workflow_is_refused_with_the_envelope(client: httpx.Client):
    r = client.post("/v1/import/comfyui", content=b'{"hello": 1}')
    assert r.status_code == 422
    assert r.json()["error"]["code"] == "not_a_workflow"
    assert "not a ComfyUI workflow" in r.json()["error"]["message"]


def test_a_packs_mapping_imports_and_runs(client: httpx.Client):
    prompt = {
        "1": {"class_type": "PrimitiveString", "inputs": {"value": "hello"}},
        "2": {"class_type": "TestEchoText", "inputs": {"text": ["1", 0], "suffix": "!"}},
    }
    r = client.post("/v1/import/comfyui", content=json.dumps(prompt).encode())
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["report"]["complete"] is True, doc["report"]
    assert doc["target"] == "2"
    echo = next(n for n in doc["graph"]["nodes"] if n["id"] == "2")
    assert echo["type"] == "testpack/echo" and echo["params"] == {"suffix": "!"}
    run = client.post("/v1/runs", json={"graph": doc["graph"], "target": doc["target"]})
    assert run.status_code in (200, 201, 202), run.text
