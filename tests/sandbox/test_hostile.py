"""A third-party pack's worker runs sandboxed (bubblewrap): every attempt of the hostile pack
(``tests/packs/hostile``) to read the user's or the host's files, write outside its scratch,
reach the network, or look at the host's process fails with the OS's error as a node error,
and the host lives on. The same node in a pack that declares ``network = true`` gets through."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ..api._helpers import body, echo_graph, node, run_to_end
from ..api.conftest import ROOT, Server, start_server
from ..e2e.conftest import inline_exe

PACKS = (
    ROOT / "tests/packs/hostile",
    ROOT / "tests/packs/hostilenet",
    ROOT / "tests/packs/testpack",
)

#: scripts/test installs bubblewrap; in CI its absence fails these tests rather than skip them
pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None and not os.environ.get("CI"),
    reason="bubblewrap is not installed (scripts/test installs it)",
)


class Hello:
    """A TCP server on 127.0.0.1 that says hello to whoever connects."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            with conn:
                conn.sendall(b"hello")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A server whose data dir lies inside an input root (it must stay hidden all the same),
    with a home holding an ssh key and a stored secret; only what the sandbox grants is
    readable (``INLINE_SANDBOX_READ`` is emptied)."""
    tmp = tmp_path_factory.mktemp("sandbox")
    home, root = tmp / "home", tmp / "world"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n")
    data = root / "data"
    (root / "inputs").mkdir(parents=True)
    (root / "inputs" / "hello.txt").write_text("an input")
    env = {"HOME": str(home), "INLINE_SANDBOX_READ": "", "INLINE_INPUT_ROOTS": str(root),
           "INLINE_PACK_PATHS": os.pathsep.join(str(p) for p in PACKS)}  # fmt: skip
    stored = subprocess.run([inline_exe(), "secrets", "set", "ANTHROPIC_API_KEY"],
                            input="sk-ant-1234\n", text=True, capture_output=True,
                            env={**os.environ, **env, "INLINE_DATA_DIR": str(data)})  # fmt: skip
    assert stored.returncode == 0, stored.stderr
    srv = start_server(data, root / "inputs", env)
    srv.env["INLINE_INPUT_ROOTS"] = str(root)
    hello = Hello()
    try:
        yield {"server": srv, "home": home, "root": root, "data": data, "hello": hello}
    finally:
        srv.stop()
        hello.sock.close()


def attempt(srv: Server, node_type: str, **params: Any) -> dict[str, Any]:
    with httpx.Client(base_url=srv.url, timeout=120) as client:
        return run_to_end(client, srv.ws, body("n", node("n", node_type, params)))


def refused(srv: Server, node_type: str, error: str, **params: Any) -> str:
    state = attempt(srv, node_type, **params)
    assert state["status"] == "error", (node_type, params, state)
    message = state["error"]["message"]
    assert error in message, (node_type, params, message)
    return message


def test_the_files_of_the_user_and_of_the_host_are_out_of_reach(world: dict[str, Any]):
    srv, data = world["server"], world["data"]
    assert (data / "secrets.json").is_file() and (data / "inline.db").is_file()
    for path in (
        world["home"] / ".ssh" / "id_ed25519",  # the user's key
        data / "secrets.json",  # the host's secrets
        data / "operator-token",  # the operator's token
        data / "inline.db",  # the run store
    ):
        assert path.exists(), path
        refused(srv, "hostile/read", "No such file or directory", path=str(path))
    with httpx.Client(base_url=srv.url, timeout=120) as client:  # another pack's venv, built
        assert run_to_end(client, srv.ws, echo_graph("hi"))["status"] == "done"
    venvs = sorted((data / "packs" / "testpack").glob("*/venv/pyvenv.cfg"))
    assert venvs, "the testpack venv was built"
    refused(srv, "hostile/read", "No such file or directory", path=str(venvs[0]))
    # the data dir is inside a readable root, and masked: it looks empty
    listed = attempt(srv, "hostile/list", path=str(data))
    assert listed["status"] == "done", listed
    # what it may read, it reads: an input under the same root
    ok = attempt(srv, "hostile/read", path=str(world["root"] / "inputs" / "hello.txt"))
    assert ok["status"] == "done", ok


def test_it_writes_only_its_scratch(world: dict[str, Any]):
    srv, root = world["server"], world["root"]
    refused(srv, "hostile/write", "Read-only file system", path=str(root / "pwned"))
    refused(srv, "hostile/write", "No such file or directory",
            path=str(world["home"] / ".ssh" / "authorized_keys"))  # fmt: skip
    assert not (root / "pwned").exists()
    assert not (world["home"] / ".ssh" / "authorized_keys").exists()
    scratch = attempt(srv, "hostile/write", path="/tmp/mine")
    assert scratch["status"] == "done", scratch
    assert (world["data"] / "scratch" / "hostile" / "tmp" / "mine").read_text() == "pwned"


def test_no_network_unless_the_manifest_says_so(world: dict[str, Any]):
    srv, hello = world["server"], world["hello"]
    before = hello.accepted
    refused(srv, "hostile/connect", "Errno", port=hello.port)
    assert hello.accepted == before  # never reached it
    through = attempt(srv, "hostilenet/connect", port=hello.port)
    assert through["status"] == "done", through
    assert hello.accepted == before + 1


def test_a_pack_that_names_its_model_categories_sees_only_those(world: dict[str, Any]):
    srv, models = world["server"], world["data"] / "models"  # inside the masked data dir
    files = {}
    for category in ("vae", "checkpoints"):
        (models / category).mkdir(parents=True, exist_ok=True)
        files[category] = models / category / f"{category}.safetensors"
        files[category].write_text(category)
    for path in files.values():  # the hostile pack names none: it reads every category
        assert attempt(srv, "hostile/read", path=str(path))["status"] == "done"
    # hostilenet names vae alone (its worker may have started before the file was written)
    seen = attempt(srv, "hostilenet/read", path=str(files["vae"]))
    assert seen["status"] == "done", seen
    refused(srv, "hostilenet/read", "No such file or directory", path=str(files["checkpoints"]))


def test_a_model_category_that_is_no_catalog_is_named(tmp_path: Path):
    from inline_registry import PackInvalid
    from inline_registry._manifest import parse_manifest

    with pytest.raises(PackInvalid, match=r"tool.inline.model_categories: 'checkpoint' is not a"):
        parse_manifest({"model_categories": ["vae", "checkpoint"]}, str(tmp_path))
    assert parse_manifest({"model_categories": []}, "x").model_categories == ()
    assert parse_manifest({}, "x").model_categories is None


def test_the_host_process_is_out_of_sight(world: dict[str, Any]):
    srv = world["server"]
    host = srv.proc.pid
    refused(srv, "hostile/environ", "No such file or directory", pid=host)
    refused(srv, "hostile/ptrace", "No such process", pid=host)
    seen = attempt(srv, "hostile/whoami")
    assert seen["status"] == "done", seen
    with httpx.Client(base_url=srv.url, timeout=30) as client:
        text = client.get(f"/v1/takes/{seen['takes'][0]['id']}/bytes").text
        health = client.get("/v1/health").json()
    assert "INLINE_" in text  # its own knobs reach it
    assert str(world["data"]) not in text and "INLINE_DATA_DIR" not in text
    assert health["ok"] and health["sandbox"]["active"] is True
    assert health["sandbox"]["mode"] == "auto"
    assert health["workers"]["hostile"]["sandboxed"] is True


def test_a_secret_reaches_a_pack_only_by_grant(world: dict[str, Any]):
    srv, data = world["server"], world["data"]
    cli = {**os.environ, **srv.env, "INLINE_DATA_DIR": str(data)}
    listed = subprocess.run([inline_exe(), "secrets", "list"], env=cli, capture_output=True,
                            text=True)  # fmt: skip
    assert "ANTHROPIC_API_KEY" in listed.stdout and "hosted" in listed.stdout  # granted to it
    assert "sk-ant" not in listed.stdout
    message = refused(srv, "anthropic/steal", "was not granted the secret 'ANTHROPIC_API_KEY'")
    assert "inline secrets grant ANTHROPIC_API_KEY hostile" in message
    assert "sk-ant" not in message
    granted = subprocess.run([inline_exe(), "secrets", "grant", "ANTHROPIC_API_KEY", "hostile"],
                             env=cli, capture_output=True, text=True)  # fmt: skip
    assert granted.returncode == 0, granted.stderr
    got = attempt(srv, "anthropic/steal")
    assert got["status"] == "done", got
    with httpx.Client(base_url=srv.url, timeout=30) as client:
        text = client.get(f"/v1/takes/{got['takes'][0]['id']}/bytes").text
    assert text == "got 11 characters"
    revoked = subprocess.run([inline_exe(), "secrets", "revoke", "ANTHROPIC_API_KEY", "hostile"],
                             env=cli, capture_output=True, text=True)  # fmt: skip
    assert revoked.returncode == 0, revoked.stderr
    listed = subprocess.run([inline_exe(), "secrets", "list"], env=cli, capture_output=True,
                            text=True)  # fmt: skip
    assert "hostile" not in listed.stdout


def test_it_sees_no_shared_memory_but_its_own(world: dict[str, Any]):
    """Bulk bytes of another pack's worker lie in that worker's own ``/dev/shm`` folder, which
    the host reads and the hostile worker can neither list nor open."""
    srv = world["server"]
    made = attempt(srv, "testpack/blob", mib=1.0)
    assert made["status"] == "done", made
    with httpx.Client(base_url=srv.url, timeout=30) as client:
        data = client.get(f"/v1/takes/{made['takes'][0]['id']}/bytes").content
    assert len(data) == 1024 * 1024 and data[0] == 7 and data[-1] == 9  # read by the host
    host = srv.proc.pid
    segments = sorted(Path("/dev/shm").glob(f"inline-{host}-testpack.shm-*/inline-{host}-*"))
    assert segments, "testpack's bytes went through its own shared-memory folder"
    assert not list(Path("/dev/shm").glob(f"inline-{host}-testpack-*"))  # none in the open
    listed = attempt(srv, "hostile/list", path="/dev/shm")
    assert listed["status"] == "done", listed
    with httpx.Client(base_url=srv.url, timeout=30) as client:
        seen = client.get(f"/v1/takes/{listed['takes'][0]['id']}/bytes").text
    assert "testpack" not in seen and f"inline-{host}" not in seen
    for path in (segments[0], Path("/dev/shm") / segments[0].name):
        refused(srv, "hostile/read", "No such file or directory", path=str(path))


def test_it_reads_the_assets_its_calls_name_and_no_other_blob(world: dict[str, Any]):
    """Uploaded assets and every take's bytes share the blob store: a sandboxed worker reads
    an asset its call names (from its pack's view), never the store itself."""
    srv, data = world["server"], world["data"]
    png = b"\x89PNG\r\n\x1a\n"  # what an upload must look like (a media file)
    secret, mine = png + os.urandom(8).hex().encode(), png + os.urandom(8).hex().encode()
    with httpx.Client(base_url=srv.url, timeout=30) as client:
        theirs = client.post("/v1/assets", content=secret, headers={"Content-Type": "image/png"})
        upload = client.post("/v1/assets", content=mine, headers={"Content-Type": "image/png"})
    assert theirs.status_code == 200 and upload.status_code == 200, (theirs.text, upload.text)
    read = attempt(srv, "hostile/asset", asset={"ref": "asset", "id": upload.json()["id"]})
    assert read["status"] == "done", read
    with httpx.Client(base_url=srv.url, timeout=30) as client:
        where, got = client.get(f"/v1/takes/{read['takes'][0]['id']}/bytes").text.split("\n", 1)
    assert got.endswith(mine[len(png) :].decode())
    assert "assets-view" in where  # its pack's view, not the blob store
    for aid in (theirs.json()["id"], upload.json()["id"]):
        digest = aid.removeprefix("sha256-")
        blob = data / "blobs" / "sha256" / digest[:2] / digest
        assert blob.is_file(), blob
        refused(srv, "hostile/read", "No such file or directory", path=str(blob))
    view = Path(where).parent
    refused(srv, "hostile/read", "No such file or directory",
            path=str(view / theirs.json()["id"].removeprefix("sha256-")))  # fmt: skip
    refused(srv, "hostile/write", "Read-only file system", path=where)  # the blob stays whole
