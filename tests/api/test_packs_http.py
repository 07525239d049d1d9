"""Pack management over HTTP, for Studio: install, run, roll back, remove, on a live server."""

from __future__ import annotations

import httpx
from inline_registry import scaffold_pack

from ._helpers import body, node, run_to_end
from .conftest import start_server


def test_install_run_and_remove_a_pack_over_http(tmp_path):
    data, inputs = tmp_path / "data", tmp_path / "inputs"
    inputs.mkdir()
    pack = scaffold_pack("webdemo", tmp_path / "src")
    server = start_server(data, inputs)
    try:
        # installing over HTTP needs the operator token, even on loopback
        token = (data / "operator-token").read_text().strip()
        with server.client(timeout=600, headers={"Authorization": f"Bearer {token}"}) as c:
            before = c.get("/v1/models").json()["registryVersion"]
            r = c.post("/v1/packs", json={"source": str(pack)})
            assert r.status_code == 201, r.text
            assert r.json()["name"] == "webdemo" and "webdemo/hello" in r.json()["nodeTypes"]
            assert c.get("/v1/models").json()["registryVersion"] != before
            listed = {p["name"]: p for p in c.get("/v1/packs").json()["packs"]}
            assert listed["webdemo"]["state"] and listed["webdemo"]["sizeBytes"] > 0
            state = run_to_end(
                c, server.ws, body("h", node("h", "webdemo/hello", {"name": "Studio"}))
            )
            assert state["status"] == "done", state
            bad = c.post("/v1/packs", json={"source": str(tmp_path / "nowhere")})
            assert bad.status_code in (404, 422) and bad.json()["error"]["message"]
            gone = c.delete("/v1/packs/webdemo")
            assert gone.status_code == 200
            assert "webdemo/hello" not in {m["type"] for m in c.get("/v1/models").json()["models"]}
            assert c.delete("/v1/packs/webdemo").status_code == 404
    finally:
        server.stop()


def test_pack_routes_need_the_token_beyond_loopback(tmp_path):
    data, inputs = tmp_path / "data", tmp_path / "inputs"
    inputs.mkdir()
    server = start_server(
        data, inputs, {"INLINE_HOST": "0.0.0.0", "INLINE_TOKEN": "t0k"}, wait=False
    )
    try:
        import time

        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                if (
                    httpx.get(
                        server.url + "/v1/health",
                        headers={"Authorization": "Bearer t0k"},
                        timeout=2,
                    ).status_code
                    == 200
                ):
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        assert httpx.get(server.url + "/v1/packs", timeout=30).status_code == 401
        ok = httpx.get(
            server.url + "/v1/packs", headers={"Authorization": "Bearer t0k"}, timeout=60
        )
        assert ok.status_code == 200 and "packs" in ok.json()
    finally:
        server.stop()


def test_a_cli_install_shows_up_in_a_running_server(tmp_path):
    import subprocess

    from .conftest import ROOT

    data, inputs = tmp_path / "data", tmp_path / "inputs"
    inputs.mkdir()
    pack = scaffold_pack("clidemo", tmp_path / "src")
    server = start_server(data, inputs)
    try:
        proc = subprocess.run(
            [str(ROOT / ".venv" / "bin" / "inline"), "pack", "install", str(pack)],
            env=server.env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr
        types = {
            m["type"] for m in httpx.get(server.url + "/v1/models", timeout=60).json()["models"]
        }
        assert "clidemo/hello" in types
    finally:
        server.stop()
