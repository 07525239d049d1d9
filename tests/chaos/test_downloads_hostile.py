"""Downloads and secrets under hostile input (issue 22, round three).

A host killed with ``kill -9`` takes its download child along and restarts on its port; a file
cut short is never taken as whole; downloads need the operator token and queue past
``INLINE_MAX_DOWNLOADS``; metadata reads are bounded in size and time; a secret goes only to
the service it was stored for; a hub that lists ``../../x`` or a disk that is full gets one
clear line.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from ..api.conftest import Server, start_server
from ..e2e.conftest import inline_exe
from ..hub._hub import ResumeHub
from ..hub.test_resume import staged, wait_until
from .conftest import Host, gone

WEIGHTS = bytes(range(250)) * 32  # 8,000 bytes
HALF = len(WEIGHTS) // 2
CONFIG = json.dumps({"architectures": ["LlamaForCausalLM"]}).encode()
#: A config.json past the 16 MiB a metadata file may be.
HUGE_CONFIG = json.dumps({"architectures": ["LlamaForCausalLM"], "pad": "x" * (17 << 20)})
REPOS = ("a", "b", "c", "cut", "unframed", "huge", "drip", "evil", "trickle")
FILES = {
    **{f"acme/{r}/config.json": CONFIG for r in REPOS},
    **{f"acme/{r}/model.safetensors": WEIGHTS for r in REPOS},
    "acme/huge/config.json": HUGE_CONFIG.encode(),
}


def weights_of(repo: str) -> str:
    return f"acme/{repo}/model.safetensors"


def hub_env(tmp: Path, hub: ResumeHub, **extra: str) -> dict[str, str]:
    """What a host or a CLI process needs to speak to ``hub`` (and to nothing else)."""
    return {"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp / "hf-home"), "HF_HUB_OFFLINE": "0",
            "HF_TOKEN": "", "INLINE_DATA_DIR": str(tmp / "data"),
            "INLINE_MODELS_DIR": str(tmp / "data" / "models"), **extra}  # fmt: skip


def inline(tmp: Path, hub: ResumeHub, *args: str, stdin: str = "", **extra: str) -> Any:
    env = {**os.environ, **hub_env(tmp, hub, **extra)}
    return subprocess.run([inline_exe(), *args], env=env, input=stdin, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def operator(server: Server) -> httpx.Client:
    token = (server.data_dir / "operator-token").read_text().strip()
    return server.client(headers={"Authorization": f"Bearer {token}"})


def download_children(pid: int) -> list[psutil.Process]:
    """The host's download children (``inline_host.hub._job``)."""
    out = []
    for child in psutil.Process(pid).children():
        try:
            if "inline_host.hub._job" in child.cmdline():
                out.append(child)
        except psutil.NoSuchProcess:
            continue
    return out


def wait_view(c: httpx.Client, download_id: str, states: set[str]) -> dict[str, Any]:
    """The download's view once it reached one of ``states`` (another process's progress)."""
    views: list[dict[str, Any]] = []

    def reached() -> bool:
        views.append(c.get(f"/v1/downloads/{download_id}").json())
        return views[-1]["state"] in states

    wait_until(reached, f"download {download_id} in {states}", timeout=120)
    return views[-1]


@pytest.fixture(scope="module")
def hub() -> Iterator[ResumeHub]:
    with ResumeHub(dict(FILES)) as fake:
        yield fake


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, hub: ResumeHub) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("dl-hostile")
    srv = start_server(tmp / "data", tmp, hub_env(tmp, hub))
    yield srv
    srv.stop()


# (1) a crashed host restarts while a download runs --------------------------------------------
def test_a_host_killed_mid_download_takes_the_child_along_and_restarts_on_its_port(
    tmp_path: Path,
):
    with ResumeHub(dict(FILES)) as fresh:
        served = fresh.stall_at(weights_of("a"), HALF)  # then holds the transfer open
        # reads wait long: the child is still held when the host dies, and is waited for less
        slow = {"HF_HUB_DOWNLOAD_TIMEOUT": "120", "INLINE_HUB_TIMEOUT": "120"}
        host = Host(tmp_path / "data", tmp_path, hub_env(tmp_path, fresh, **slow))
        children: list[psutil.Process] = []
        try:
            token = host.operator_token()
            with host.client(headers={"Authorization": f"Bearer {token}"}) as c:
                r = c.post("/v1/downloads", json={"source": "hf:acme/a"})
                assert r.status_code == 202, r.text
            assert served.wait(60), "the download never asked for the weights"
            children = download_children(host.pid)
            assert len(children) == 1, children
            port = host.server.port
            host.stop(kill9=True)
            pid = children[0].pid
            wait_until(lambda: gone(pid), f"the download child {pid} exits with its host", 30)
            host.start()  # on the same port: start_server waits for /v1/health
            assert host.server.port == port
            with host.client() as c:
                assert c.get("/v1/health").status_code == 200
        finally:
            for child in children:  # only if the assertion above failed
                if child.is_running():
                    child.kill()
            fresh.release.set()
            host.stop()


# (5) a partial download is never taken as complete --------------------------------------------
def test_a_file_cut_short_is_resumed_or_refused_never_taken_as_whole(
    tmp_path: Path, hub: ResumeHub, server: Server
):
    # the tree lists no size, no hash; the GET declares 8000 bytes and sends 4000: resumed
    hub.bare.add(weights_of("cut"))
    hub.short[weights_of("cut")] = HALF
    proc = inline(tmp_path, hub, "models", "import", "hf:acme/cut")
    assert proc.returncode == 0, proc.stderr
    dest = tmp_path / "data" / "models" / "llm"
    assert (dest / "cut" / "model.safetensors").read_bytes() == WEIGHTS
    # the same file without a Content-Length: 4000 bytes look whole, and nothing can tell
    hub.bare.add(weights_of("unframed"))
    hub.unframed.add(weights_of("unframed"))
    hub.short[weights_of("unframed")] = HALF
    proc = inline(tmp_path, hub, "models", "import", "hf:acme/unframed")
    assert proc.returncode == 1, proc.stderr
    assert "declared neither its size" in proc.stderr and "Traceback" not in proc.stderr
    assert not (dest / "unframed").exists()
    assert staged(tmp_path / "data" / "models") == {}  # no orphan stage left behind
    with operator(server) as c:
        r = c.post("/v1/downloads", json={"source": "hf:acme/unframed"})
        assert r.status_code == 202, r.text
        view = wait_view(c, r.json()["downloadId"], {"done", "failed"})
        assert view["state"] == "failed" and "declared neither its size" in view["error"]
        r = c.post("/v1/downloads", json={"source": "hf:acme/cut"})
        view = wait_view(c, r.json()["downloadId"], {"done", "failed"})
        assert view["state"] == "done", view["error"]
    models = server.data_dir / "models"
    assert not (models / "llm" / "unframed").exists()
    assert (models / "llm" / "cut" / "model.safetensors").read_bytes() == WEIGHTS


# (11) the operator token, a cap, bounded metadata ---------------------------------------------
def test_downloads_need_the_operator_token_and_queue_past_the_cap(hub: ResumeHub, server: Server):
    with server.client() as bare:
        refused = bare.post("/v1/downloads", json={"source": "hf:acme/a"})
        assert refused.status_code == 401 and "operator token" in refused.text
        assert bare.delete("/v1/downloads/dl_x").status_code == 401
    held = {r: hub.stall_at(weights_of(r), HALF) for r in ("a", "b", "c")}
    with operator(server) as c:
        ids = {}
        for repo in ("a", "b", "c"):
            r = c.post("/v1/downloads", json={"source": f"hf:acme/{repo}"})
            assert r.status_code == 202, r.text
            ids[repo] = r.json()["downloadId"]
        assert held["a"].wait(60) and held["b"].wait(60)
        assert c.get(f"/v1/downloads/{ids['c']}").json()["state"] == "queued"
        assert len(download_children(server.proc.pid)) == 2  # INLINE_MAX_DOWNLOADS's default
        assert not hub.gets_of(weights_of("c"))
        hub.release.set()  # the held transfers drop: they resume and finish, then c runs
        for repo in ("a", "b", "c"):
            assert wait_view(c, ids[repo], {"done", "failed"})["state"] == "done", repo
    hub.release.clear()


def test_metadata_is_read_within_a_size_and_a_time(tmp_path: Path, hub: ResumeHub, server: Server):
    proc = inline(tmp_path, hub, "models", "import", "hf:acme/huge", "--dry-run")
    assert proc.returncode == 1 and "past the 16 MiB" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    with operator(server) as c:
        r = c.post("/v1/downloads", json={"source": "hf:acme/huge"})
        assert r.status_code == 422 and "past the 16 MiB" in r.text
    # config.json sends one byte and then nothing: a read timeout, not a hang
    hub.drip.add("acme/drip/config.json")
    try:
        proc = inline(tmp_path, hub, "models", "import", "hf:acme/drip", "--dry-run",
                      INLINE_HUB_TIMEOUT="1")  # fmt: skip
    finally:
        hub.drip.discard("acme/drip/config.json")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "acme/drip" in proc.stderr


def test_a_server_that_drips_a_byte_at_a_time_is_given_up_on(tmp_path: Path, hub: ResumeHub):
    """The weights come one byte every 50 ms: no read ever times out, and the file would take
    400 s. The import stops at the throughput floor in one line, keeping what arrived."""
    hub.trickle.add(weights_of("trickle"))
    try:
        proc = inline(tmp_path, hub, "models", "import", "hf:acme/trickle",
                      INLINE_HUB_TIMEOUT="1")  # fmt: skip
    finally:
        hub.trickle.discard(weights_of("trickle"))
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "bytes in 1 s (under 64 KiB per INLINE_HUB_TIMEOUT=1 s)" in proc.stderr, proc.stderr


# (12) a secret only for its service ----------------------------------------------------------
def test_a_secret_goes_only_to_the_service_it_was_stored_for(
    tmp_path: Path, hub: ResumeHub, server: Server
):
    from inline_host.hub import SecretStore, secrets_for_call
    from inline_host.hub._hf import HubError, resolve_token

    data = tmp_path / "data"
    data.mkdir()
    # a secrets file written before services: the well-known names infer theirs
    (data / "secrets.json").write_text(json.dumps({"ANTHROPIC_API_KEY": "sk-ant-1",
                                                   "HF_TOKEN_X": "hf_x", "MINE": "m"}))  # fmt: skip
    ask = {"api_key_secret": "HF_TOKEN_X"}
    assert secrets_for_call(data, ask, "anthropic/complete", "hosted") == {}
    ask = {"api_key_secret": "ANTHROPIC_API_KEY"}
    got = secrets_for_call(data, ask, "anthropic/complete", "hosted")
    assert got == {"ANTHROPIC_API_KEY": "sk-ant-1"}
    assert secrets_for_call(data, {"api_key_secret": "MINE"}, "anthropic/complete", "hosted") == {}
    assert resolve_token(data, "HF_TOKEN_X") == "hf_x"
    with pytest.raises(HubError, match="stored for 'anthropic', not for 'hf'"):
        resolve_token(data, "ANTHROPIC_API_KEY")
    # the CLI records a service, inferred or given
    stored = inline(tmp_path, hub, "secrets", "set", "ACME_KEY", "--service", "acme",
                    "--grant", "acme", stdin="k-acme\n")  # fmt: skip
    assert stored.returncode == 0 and "for 'acme'" in stored.stderr, stored.stderr
    assert SecretStore(data).service_of("ACME_KEY") == "acme"
    acme = {"key_secret": "ACME_KEY"}
    assert secrets_for_call(data, acme, "acme/up", "acme") == {"ACME_KEY": "k-acme"}
    assert secrets_for_call(data, acme, "google/gemini-image", "hosted") == {}
    # over HTTP: naming a secret needs the operator token, and an Anthropic key is no Hub token
    srv_data = server.data_dir
    stored = subprocess.run([inline_exe(), "secrets", "set", "ANTHROPIC_API_KEY"],
                            input="sk-ant-never-sent\n", text=True, capture_output=True,
                            env={**os.environ, "INLINE_DATA_DIR": str(srv_data)},
                            timeout=60)  # fmt: skip
    assert stored.returncode == 0, stored.stderr
    body = {"source": "hf:acme/b", "tokenSecret": "ANTHROPIC_API_KEY"}
    before = len(hub.gets)
    with server.client() as bare:
        assert bare.post("/v1/downloads", json=body).status_code == 401
    with operator(server) as c:
        r = c.post("/v1/downloads", json=body)
        assert r.status_code == 422 and "not for 'hf'" in r.text, r.text
    assert len(hub.gets) == before  # the Hub never heard of it


# (low) a traversal name from a hub, a full disk ------------------------------------------------
def test_a_tree_entry_outside_the_folder_refuses_the_repo_in_one_line(
    tmp_path: Path, hub: ResumeHub, server: Server
):
    hub.tree_extra.append({"type": "file", "path": "../../x", "size": 3, "oid": "0" * 40})
    try:
        proc = inline(tmp_path, hub, "models", "import", "hf:acme/evil", "--dry-run")
        with operator(server) as c:
            r = c.post("/v1/downloads", json={"source": "hf:acme/evil"})
            listed = c.get("/v1/downloads").text
    finally:
        hub.tree_extra.clear()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "'../../x'" in lines[0] and "outside" in lines[0], lines
    assert r.status_code == 422 and "outside" in r.text
    assert "../../x" not in listed


@pytest.fixture
def in_process(hub: ResumeHub, monkeypatch: pytest.MonkeyPatch) -> ResumeHub:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", hub.url)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    return hub


def test_a_full_disk_is_named_as_such_not_as_an_unreachable_hub(
    tmp_path: Path, in_process: ResumeHub, monkeypatch: pytest.MonkeyPatch
):
    from inline_host.hub._pull import Fetch, PullError, fetch, staging_dir
    from inline_host.hub._transfer import stage_file

    models = tmp_path / "models"
    f = Fetch("Weights", "acme/b", "model.safetensors", "main", models / "w.safetensors", None)
    # the stage itself cannot be written (/dev/full answers every write with ENOSPC)
    part = stage_file(staging_dir("acme/b", models), f.path, hashlib.sha256(WEIGHTS).hexdigest())
    part.parent.mkdir(parents=True)
    part.symlink_to("/dev/full")
    with pytest.raises(PullError) as err:
        fetch(f, models, say=lambda _: None)
    assert "disk is full" in str(err.value) and str(part.parent) in str(err.value)
    assert "cannot reach" not in str(err.value)
    part.unlink()
    # no room even for the stage's lock
    real_mkdir = Path.mkdir

    def full(self: Path, *args: Any, **kw: Any) -> None:
        if str(self).startswith(str(models)):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        real_mkdir(self, *args, **kw)

    monkeypatch.setattr(Path, "mkdir", full)
    with pytest.raises(PullError) as err:
        fetch(f, models, say=lambda _: None)
    assert "disk is full" in str(err.value) and "cannot reach" not in str(err.value)
