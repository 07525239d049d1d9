"""``/v1/models/local`` on a real server: a ``file:`` folder imported through
``/v1/downloads`` lands in ``models/<category>/<name>/`` with its card, is listed, shown and
removed, and is gone from the node pickers; a removal is refused while a deployment serves the
model or a run uses it, and ``force`` undeploys and cancels them first; bad sources are one
clear line."""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from ._helpers import body, node
from .conftest import Server, start_server


def weights(folder: Path, params: int = 64, name: str = "model.safetensors") -> Path:
    """A real safetensors file of ``params`` bf16 zeros in ``folder``."""
    header = json.dumps(
        {"w": {"dtype": "BF16", "shape": [params], "data_offsets": [0, 2 * params]}}
    )
    raw = header.encode()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(2 * params))
    return folder


def eventually(check: Callable[[], Any], what: str, timeout: float = 120) -> Any:
    """``check()``'s first truthy answer (bounded: a state another process reaches)."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"never: {what}")
        time.sleep(0.05)  # polling another process's progress, not synchronisation


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One run at a time: a second run waits, queued, behind a held one."""
    data = tmp_path_factory.mktemp("local-models")
    inputs = tmp_path_factory.mktemp("local-models-inputs")
    srv = start_server(data, inputs, {"INLINE_MAX_RUNS": "1"})
    yield srv
    srv.stop()


@pytest.fixture
def client(server: Server) -> Iterator[httpx.Client]:
    token = (server.data_dir / "operator-token").read_text().strip()
    with server.client(headers={"Authorization": f"Bearer {token}"}) as c:
        yield c


def models_dir(server: Server) -> Path:
    return server.data_dir / "models"


def picker(client: httpx.Client) -> list[str]:
    """What ``testpack/read-model``'s VAE picker offers now."""
    r = client.get("/v1/models/testpack/read-model")
    assert r.status_code == 200, r.text
    field = next(p for p in r.json()["params"] if p["key"] == "file")
    return [o["value"] for o in field.get("options", [])]


def listed(client: httpx.Client) -> dict[str, dict[str, Any]]:
    r = client.get("/v1/models/local")
    assert r.status_code == 200, r.text
    return {f"{m['folder']}/{m['name']}": m for m in r.json()["models"]}


def held(client: httpx.Client, server: Server, doc: dict[str, Any]) -> str:
    """Submit ``doc`` and return its id once its node reports progress (it is running)."""
    run_id = client.post("/v1/runs", json=doc).json()["runId"]
    with connect(f"{server.ws}/v1/runs/{run_id}/events", open_timeout=30) as ws:
        while json.loads(ws.recv(timeout=120))["type"] != "progress":
            pass
    return run_id


def one_line(r: httpx.Response) -> str:
    message = r.json()["error"]["message"]
    assert "\n" not in message, message
    return message


def test_a_file_folder_imports_is_listed_shown_removed_and_leaves_the_pickers(
    server: Server, client: httpx.Client, tmp_path: Path
):
    src = weights(tmp_path / "tiny-vae", 256, "diffusion_pytorch_model.safetensors")
    (src / "config.json").write_text(json.dumps({"_class_name": "AutoencoderKL"}))
    r = client.post("/v1/downloads", json={"source": f"file:{src}", "task": "vae"})
    assert r.status_code == 202, r.text
    dest = models_dir(server) / "vae" / "tiny-vae"
    assert r.json()["dest"] == str(dest)
    assert {f["path"] for f in r.json()["files"]} == {
        "config.json", "diffusion_pytorch_model.safetensors",
    }  # fmt: skip
    download_id = r.json()["downloadId"]
    done = eventually(
        lambda: (
            (v := client.get(f"/v1/downloads/{download_id}").json())["state"] in ("done", "failed")
            and v
        ),
        "the import ended",
    )
    assert done["state"] == "done", done
    assert done["bytesDone"] == done["bytesTotal"] > 0
    weights_file = "diffusion_pytorch_model.safetensors"
    assert (dest / weights_file).read_bytes() == (src / weights_file).read_bytes()
    card = json.loads((dest / "inline.json").read_text())
    assert card["source"] == f"file:{src}" and card["category"] == "vae"

    model = listed(client)["vae/tiny-vae"]
    assert model == {
        "name": "tiny-vae", "category": "vae", "folder": "vae", "path": str(dest),
        "bytes": model["bytes"], "source": f"file:{src}", "complete": True, "deployed": False,
        "card": None,
    }  # fmt: skip
    assert model["bytes"] >= (src / weights_file).stat().st_size
    shown = client.get("/v1/models/local/tiny-vae")
    assert shown.status_code == 200, shown.text
    assert shown.json()["card"]["source"] == f"file:{src}"
    assert shown.json()["card"]["requirements"]["params"] == 256
    assert "tiny-vae" in picker(client)

    unauthorised = httpx.delete(f"{server.url}/v1/models/local/tiny-vae")
    assert unauthorised.status_code == 401 and "operator token" in unauthorised.text
    gone = client.delete("/v1/models/local/tiny-vae")
    assert gone.status_code == 200, gone.text
    assert gone.json()["name"] == "tiny-vae" and gone.json()["card"]["category"] == "vae"
    assert not dest.exists()
    assert "vae/tiny-vae" not in listed(client)
    assert "tiny-vae" not in picker(client)
    missing = client.get("/v1/models/local/tiny-vae")
    assert missing.status_code == 404 and "No model 'tiny-vae'" in one_line(missing)
    assert client.delete("/v1/models/local/tiny-vae").status_code == 404


def test_a_name_two_folders_hold_is_named_with_its_folder(client: httpx.Client, server: Server):
    weights(models_dir(server) / "vae" / "twin")
    weights(models_dir(server) / "loras" / "twin")
    both = client.get("/v1/models/local/twin")
    assert both.status_code == 404 and "more than one model" in one_line(both)
    lora = client.get("/v1/models/local/loras/twin")
    assert lora.status_code == 200 and lora.json()["folder"] == "loras"
    assert client.delete("/v1/models/local/loras/twin").status_code == 200
    assert not (models_dir(server) / "loras" / "twin").exists()
    assert (models_dir(server) / "vae" / "twin").is_dir()
    assert client.delete("/v1/models/local/twin").status_code == 200
    assert client.get("/v1/models/local/vae/nothing").status_code == 404


def test_a_served_model_is_kept_until_forced_which_undeploys(client: httpx.Client, server: Server):
    folder = weights(models_dir(server) / "vae" / "served-vae")
    r = client.post("/v1/deployments", json={"node": "testpack/read-model", "model": "served-vae"})
    assert r.status_code == 201, r.text
    name = r.json()["name"]
    assert listed(client)["vae/served-vae"]["deployed"] is True
    assert client.get("/v1/models/local/served-vae").json()["deployed"] is True
    refused = client.delete("/v1/models/local/served-vae")
    assert refused.status_code == 409, refused.text
    assert name in one_line(refused) and "force=true" in one_line(refused)
    assert refused.json()["error"]["deployments"] == [name]
    assert folder.is_dir() and client.get(f"/v1/deployments/{name}").status_code == 200
    forced = client.delete("/v1/models/local/served-vae?force=true")
    assert forced.status_code == 200, forced.text
    assert forced.json()["deployed"] is False
    assert client.get("/v1/deployments").json() == {"deployments": []}
    assert not folder.exists() and "served-vae" not in picker(client)


def test_a_model_runs_use_is_kept_until_forced_which_cancels_them(
    client: httpx.Client, server: Server
):
    folder = weights(models_dir(server) / "vae" / "used-vae")
    # running: a gate held until a file inside the model's folder exists (a path inside it)
    running = held(client, server, body("g", node("g", "testpack/gate",
                                                  {"file": str(folder / "open")})))  # fmt: skip
    # queued behind it (one run at a time): a picker naming the model
    queued = client.post(
        "/v1/runs", json=body("m", node("m", "testpack/read-model", {"file": "used-vae"}))
    ).json()["runId"]
    assert client.get(f"/v1/runs/{queued}").json()["status"] == "queued"
    refused = client.delete("/v1/models/local/used-vae")
    assert refused.status_code == 409, refused.text
    assert running in one_line(refused) and queued in one_line(refused)
    assert sorted(refused.json()["error"]["runs"]) == sorted([running, queued])
    assert folder.is_dir()
    forced = client.delete("/v1/models/local/used-vae", params={"force": "true"})
    assert forced.status_code == 200, forced.text
    for run_id in (running, queued):
        assert client.get(f"/v1/runs/{run_id}").json()["status"] == "cancelled"
    assert not folder.exists() and "used-vae" not in picker(client)


def test_bad_sources_are_refused_in_one_line(client: httpx.Client, tmp_path: Path):
    unknown = client.post("/v1/downloads", json={"source": "nope:some/thing"})
    assert unknown.status_code == 422, unknown.text
    assert "no source has the prefix 'nope:'" in one_line(unknown)
    assert "file:" in one_line(unknown) and "url:" in one_line(unknown)
    absent = client.post("/v1/downloads", json={"source": f"file:{tmp_path / 'none'}"})
    assert absent.status_code == 422 and "no such file or folder" in one_line(absent)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "config.json").write_text("{}")
    empty = client.post("/v1/downloads", json={"source": f"file:{tmp_path / 'empty'}",
                                               "task": "vae"})  # fmt: skip
    assert empty.status_code == 422 and "no weight files" in one_line(empty)
    weights(tmp_path / "kind")
    kind = client.post("/v1/downloads", json={"source": f"file:{tmp_path / 'kind'}",
                                              "task": "painting"})  # fmt: skip
    assert kind.status_code == 422 and "not a category" in one_line(kind)
    untold = client.post("/v1/downloads", json={"source": f"file:{tmp_path / 'kind'}"})
    assert untold.status_code == 422 and "cannot tell what kind of model" in one_line(untold)
    task_alone = client.post("/v1/downloads", json={"node": "testpack/echo", "task": "vae"})
    assert task_alone.status_code == 422 and '"task"' in one_line(task_alone)


def test_a_single_files_hidden_hash_and_lock_go_with_it(client: httpx.Client, server: Server):
    """A cluster fetch keeps a file's hash, lock and unfinished part beside it: removing the
    model removes them, and nothing of another model."""
    vae = models_dir(server) / "vae"
    vae.mkdir(parents=True, exist_ok=True)
    (vae / "lone.safetensors").write_bytes(b"weights")
    kept = [vae / f".lone.safetensors.{end}" for end in ("sha256", "lock", "partial")]
    for path in kept:
        path.write_text("kept")
    other = vae / ".other.safetensors.sha256"
    other.write_text("kept")
    assert client.delete("/v1/models/local/lone.safetensors").status_code == 200
    assert not (vae / "lone.safetensors").exists()
    assert not any(p.exists() for p in kept) and other.exists()
