"""``/v1/downloads`` on a real server: a Hub repo and a node's recommended files download with
per-file progress; a download is cancelled and the next one completes; bad requests are named."""

from __future__ import annotations

import json
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ..api.conftest import Server, start_server
from ..models._hub import FakeHub

ROOT = Path(__file__).resolve().parents[2]
MODELPACK = ROOT / "tests" / "packs" / "modelpack"


def safetensors(n: int) -> bytes:
    header = json.dumps({"w": {"dtype": "F32", "shape": [n], "data_offsets": [0, 4 * n]}})
    raw = header.encode()
    return struct.pack("<Q", len(raw)) + raw + bytes(4 * n)


WEIGHTS = safetensors(1000)
FILES = {
    "acme/small-lm/config.json": json.dumps({"architectures": ["LlamaForCausalLM"]}).encode(),
    "acme/small-lm/model.safetensors": WEIGHTS,
    "acme/small-lm/README.md": b"# docs",
    "acme/tiny/split/tiny.safetensors": bytes(range(256)) * 93750,
    "acme/tok/tokenizer/tokenizer.json": b'{"model": {}}',
    "acme/tok/tokenizer/tokenizer_config.json": b'{"chat_template": "x"}',
    "acme/gated/config.json": b"{}",
}


@pytest.fixture(scope="module")
def hub() -> Iterator[FakeHub]:
    with FakeHub(dict(FILES), gated={"acme/gated"}) as fake:
        yield fake


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, hub: FakeHub) -> Iterator[Server]:
    builtin = tmp_path_factory.mktemp("dl-builtin")
    (builtin / "basics").symlink_to(ROOT / "packs" / "basics", target_is_directory=True)
    data = tmp_path_factory.mktemp("dl-data")
    srv = start_server(data, data, {"INLINE_BUILTIN_PACKS": str(builtin), "HF_ENDPOINT": hub.url,
                                    "HF_HOME": str(data / "hf-home"),
                                    "INLINE_PACK_PATHS": str(MODELPACK)})  # fmt: skip
    yield srv
    srv.stop()


def operator(server: Server) -> httpx.Client:
    """A client holding the operator token, which starting and cancelling downloads need."""
    token = (server.data_dir / "operator-token").read_text().strip()
    return server.client(headers={"Authorization": f"Bearer {token}"})


def wait_state(client: httpx.Client, download_id: str, states: set[str]) -> dict[str, Any]:
    """Poll the download until it reaches one of ``states`` (bounded)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        view = client.get(f"/v1/downloads/{download_id}").json()
        if view["state"] in states:
            return view
        time.sleep(0.05)  # polling another process's progress, not synchronisation
    raise AssertionError(f"download {download_id} never reached {states}: {view}")


def test_a_hub_download_is_cancelled_then_resumed_to_the_end(server: Server, hub: FakeHub):
    key = "acme/small-lm/model.safetensors"
    hub.hold[key] = threading.Event()
    with operator(server) as c:
        r = c.post("/v1/downloads", json={"source": "hf:acme/small-lm"})
        assert r.status_code == 202, r.text
        first = r.json()["downloadId"]
        assert hub.reached.setdefault(key, threading.Event()).wait(60)
        view = c.get(f"/v1/downloads/{first}").json()
        assert view["state"] == "running"
        files = {f["path"]: f for f in view["files"]}
        assert set(files) == {"config.json", "model.safetensors"}  # README skipped
        assert files["model.safetensors"]["bytesTotal"] == len(WEIGHTS)
        assert files["model.safetensors"]["state"] == "downloading"
        assert view["bytesTotal"] == len(WEIGHTS) + len(FILES["acme/small-lm/config.json"])
        cancelled = c.delete(f"/v1/downloads/{first}")
        assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
        hub.hold.pop(key).set()
        dest = server.data_dir / "models" / "llm" / "small-lm"
        assert not (dest / "model.safetensors").exists()
        again = c.post("/v1/downloads", json={"source": "hf:acme/small-lm"}).json()
        done = wait_state(c, again["downloadId"], {"done", "failed"})
        assert done["state"] == "done", done
        assert done["bytesDone"] == done["bytesTotal"]
        assert all(f["state"] == "done" for f in done["files"])
        assert (dest / "model.safetensors").read_bytes() == WEIGHTS
        assert not (dest / "README.md").exists()
        listed = c.get("/v1/downloads").json()["downloads"]
        assert {d["downloadId"] for d in listed} >= {first, again["downloadId"]}


def test_a_nodes_recommended_files_download(server: Server):
    with operator(server) as c:
        r = c.post("/v1/downloads", json={"node": "modelpack/needs-models"})
        assert r.status_code == 202, r.text
        assert {f["path"] for f in r.json()["files"]} == {
            "split/tiny.safetensors", "tokenizer/tokenizer.json",
            "tokenizer/tokenizer_config.json",
        }  # fmt: skip
        done = wait_state(c, r.json()["downloadId"], {"done", "failed"})
        assert done["state"] == "done", done
        models = server.data_dir / "models"
        assert (models / "diffusion_models" / "tiny.safetensors").stat().st_size == 24_000_000
        assert (models / "text_encoders" / "tiny_tokenizer" / "tokenizer.json").is_file()
        assert done["bytesDone"] >= 24_000_000


def test_bad_download_requests_are_named(server: Server):
    with operator(server) as c:
        bad = c.post("/v1/downloads", json={"source": "acme/x"})
        assert bad.status_code == 422 and "not a Hugging Face source" in bad.text
        assert c.post("/v1/downloads", json={}).status_code == 422
        gated = c.post("/v1/downloads", json={"source": "hf:acme/gated"})
        assert gated.status_code == 403 and "gated repo" in gated.json()["error"]["message"]
        unset = c.post("/v1/downloads", json={"source": "hf:acme/gated", "tokenSecret": "NOPE"})
        assert unset.status_code == 422 and "'NOPE' is not set" in unset.text
        missing = c.post("/v1/downloads", json={"source": "hf:acme/none"})
        assert missing.status_code == 404 and "no such repo" in missing.text
        node = c.post("/v1/downloads", json={"node": "nobody/none"})
        assert node.status_code == 404 and "no installed pack declares" in node.text
        assert c.get("/v1/downloads/dl_nope").status_code == 404
        assert c.delete("/v1/downloads/dl_nope").status_code == 404


def test_downloads_are_for_loopback_or_the_token():
    from types import SimpleNamespace

    from inline_host.api._downloads import guard_downloads
    from inline_host.hub._downloads import DownloadRefused

    def conn(host: str, token: str | None) -> Any:
        service = SimpleNamespace(settings=SimpleNamespace(token=token))
        return SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace(downloads=service)),
                               client=SimpleNamespace(host=host))  # fmt: skip

    guard_downloads(conn("127.0.0.1", None), None)  # type: ignore[arg-type]
    guard_downloads(conn("::1", None), None)  # type: ignore[arg-type]
    guard_downloads(conn("10.1.2.3", "s3cret"), None)  # type: ignore[arg-type]
    with pytest.raises(DownloadRefused) as err:
        guard_downloads(conn("10.1.2.3", None), None)  # type: ignore[arg-type]
    assert err.value.status == 403 and "only available from this machine" in str(err.value)
