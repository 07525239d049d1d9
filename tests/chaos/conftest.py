"""A real host on loopback with the chaos pack, restartable (SIGTERM or kill -9) on one data dir."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from ..api.conftest import ROOT, Server, start_server

CHAOS_PACK = Path(__file__).resolve().parent / "chaospack"
PACKS = (ROOT / "tests" / "packs" / "testpack", CHAOS_PACK)
#: The chaos host: two runs at once, three may wait, cancels get half a second, outputs 64 MB.
ENV = {
    "INLINE_PACK_PATHS": os.pathsep.join(str(p) for p in PACKS),
    "INLINE_MAX_RUNS": "2",
    "INLINE_MAX_QUEUED": "3",
    "INLINE_CANCEL_GRACE": "0.5",
    "INLINE_CALL_TIMEOUT": "120",
    "INLINE_MAX_OUTPUT_MB": "64",
    "INLINE_MAX_UPLOAD_MB": "256",
}


class Host:
    """The chaos host and how to restart it."""

    def __init__(self, data: Path, inputs: Path, env: dict[str, str] | None = None) -> None:
        self.data, self.inputs = data, inputs
        self.env = {**ENV, **(env or {})}
        self.server: Server = start_server(data, inputs, self.env)

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def ws(self) -> str:
        return self.server.ws

    @property
    def pid(self) -> int:
        return self.server.proc.pid

    def client(self, **kw: Any) -> httpx.Client:
        return self.server.client(**kw)

    def restart(self, *, kill9: bool = False) -> None:
        """Stop (SIGTERM, or SIGKILL with ``kill9``) and start again on the same data dir."""
        if kill9:
            self.server.kill9()
        else:
            self.server.stop()
        self.start()

    def stop(self, *, kill9: bool = False) -> None:
        if kill9:
            self.server.kill9()
        else:
            self.server.stop()

    def start(self) -> None:
        self.server = start_server(self.data, self.inputs, self.env, port=self.server.port)

    def operator_token(self) -> str:
        return (self.data / "operator-token").read_text().strip()


@pytest.fixture(scope="session")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    # CHAOS_DATA_DIR keeps built pack venvs between local runs (CI starts fresh)
    kept = os.environ.get("CHAOS_DATA_DIR")
    root = Path(kept) if kept else tmp_path_factory.mktemp("chaos")
    inputs = root / "inputs"
    inputs.mkdir(parents=True, exist_ok=True)
    h = Host(root / "data", inputs)
    yield h
    h.server.stop()


@pytest.fixture
def client(host: Host) -> Iterator[httpx.Client]:
    with host.client(timeout=60) as c:
        yield c


def node(node_id: str, node_type: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"id": node_id, "type": node_type, "params": params or {}}


def one(node_type: str, params: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """A run request of a single node ``n``."""
    return {
        "graph": {"schemaVersion": 1, "nodes": [node("n", node_type, params)]},
        "target": "n",
        **extra,
    }


def follow(ws_url: str, run_id: str, until: set[str], timeout: float = 60) -> dict[str, Any]:
    """The first event of ``run_id`` whose type is in ``until`` (or a terminal one). A snapshot
    counts as ``progress`` once a node reported some (the event itself may predate it)."""
    with connect(f"{ws_url}/v1/runs/{run_id}/events", open_timeout=30) as ws:
        while True:
            msg = json.loads(ws.recv(timeout=timeout))
            if msg["type"] in until or msg["type"] in ("run_done", "error", "cancelled"):
                return msg
            if msg["type"] == "snapshot":
                state = msg["state"]
                if state["status"] in ("done", "error", "cancelled"):
                    return msg
                started = any(n.get("fraction", 0) > 0 for n in state["nodes"].values())
                if "progress" in until and started:
                    return {**msg, "type": "progress"}


def finish(client: httpx.Client, ws_url: str, doc: dict[str, Any]) -> dict[str, Any]:
    """Submit ``doc``, wait for its end, return its final state."""
    r = client.post("/v1/runs", json=doc)
    assert r.status_code in (200, 201), r.text
    run_id = r.json()["runId"]
    follow(ws_url, run_id, set())
    return client.get(f"/v1/runs/{run_id}").json()


def worker(client: httpx.Client, pack: str) -> dict[str, Any] | None:
    """The pack's worker as /v1/health shows it (pid, generation), if one runs."""
    return client.get("/v1/health").json()["workers"].get(pack)


def proc_status(pid: int) -> dict[str, str]:
    """``/proc/<pid>/status`` as a dict."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        out[key] = value.strip()
    return out


def gone(pid: int) -> bool:
    """Whether ``pid`` no longer runs (absent, or a zombie nobody reaped yet)."""
    try:
        return proc_status(pid).get("State", "").startswith(("Z", "X"))
    except FileNotFoundError:
        return True
