"""A new user's first minutes: submits that meet a pack venv built lazily, and graphs whose
loaders all fail at once (no weights yet), over HTTP and from the CLI on fresh data dirs."""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ..api.conftest import ROOT, Server, start_server
from .conftest import follow

#: The primitive Z-Image graph, without any weights in models/: three loaders fail at once.
PRIMITIVES: dict[str, Any] = {
    "graph": {
        "schemaVersion": 1,
        "nodes": [
            {"id": "p", "type": "input/text", "params": {"text": "a lighthouse"}},
            {"id": "m", "type": "load/diffusion-model", "params": {"file": "tiny_z.safetensors"}},
            {"id": "v", "type": "load/vae", "params": {"file": "tiny_ae.safetensors"}},
            {"id": "t", "type": "load/text-encoder", "params": {"file": "tiny_te.safetensors"}},
            {
                "id": "c",
                "type": "encode/text",
                "inputs": {
                    "text_encoder": {"from": "t", "output": "text_encoder"},
                    "prompt": {"from": "p", "output": "text"},
                },
            },
            {"id": "l", "type": "latent/empty", "params": {"width": 256, "height": 256}},
            {
                "id": "s",
                "type": "sample",
                "params": {"steps": 1, "cfg": 1.0, "seed": 3},
                "inputs": {
                    "model": {"from": "m", "output": "model"},
                    "positive": {"from": "c", "output": "conditioning"},
                    "latent": {"from": "l", "output": "latent"},
                },
            },
            {
                "id": "d",
                "type": "vae/decode",
                "inputs": {
                    "vae": {"from": "v", "output": "vae"},
                    "latent": {"from": "s", "output": "latent"},
                },
            },
        ],
    },
    "target": "d",
}
LOADERS = {
    "m": "'tiny_z.safetensors' not found under models/diffusion_models/",
    "v": "'tiny_ae.safetensors' not found under models/vae/",
    "t": "'tiny_te.safetensors' not found under models/text_encoders/",
}
CLI_TRIES = 20


def joined(tag: str) -> dict[str, Any]:
    """A basics graph of its own (nothing cached across tags)."""
    return {
        "graph": {
            "schemaVersion": 1,
            "nodes": [
                {"id": "t", "type": "input/text", "params": {"text": tag}},
                {
                    "id": "j",
                    "type": "text/join",
                    "params": {"separator": "+"},
                    "inputs": {
                        "a": {"from": "t", "output": "text"},
                        "b": {"from": "t", "output": "text"},
                    },
                },
            ],
        },
        "target": "j",
    }


def submit_all(server: Server, docs: list[dict[str, Any]]) -> list[httpx.Response]:
    """Every document POSTed at once, each from its own connection."""

    def post(doc: dict[str, Any]) -> httpx.Response:
        with server.client(timeout=300) as c:
            return c.post("/v1/runs", json=doc)

    with concurrent.futures.ThreadPoolExecutor(len(docs)) as pool:
        return list(pool.map(post, docs))


def lock_stamp(data: Path) -> int:
    try:
        return (data / "packs.lock").stat().st_mtime_ns
    except FileNotFoundError:
        return 0


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[Server]:
    """A server on a data dir of its own: no pack venv is built yet."""
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    server = start_server(tmp_path / "data", inputs, {"INLINE_MAX_QUEUED": "1000"})
    yield server
    server.stop()


def test_fifty_submits_meet_a_venv_built_lazily_and_none_fails(fresh_server: Server) -> None:
    """50 submits arrive while the basics venv is built on first use, then 50 more right after
    it changed packs.lock (each would reload the registry): every one is accepted (no 500:
    one reload, every waiter gets its result) and every run ends done."""
    data = fresh_server.data_dir
    before = lock_stamp(data)
    first = submit_all(fresh_server, [joined(f"first-{i}") for i in range(50)])
    assert [r.status_code for r in first] == [201] * 50, [r.text for r in first if r.is_error]
    # the venv build these runs started changes packs.lock; the next submits all see it
    for r in first:
        follow(fresh_server.ws, r.json()["runId"], set(), timeout=300)
    assert lock_stamp(data) != before
    second = submit_all(fresh_server, [joined(f"second-{i}") for i in range(50)])
    assert [r.status_code for r in second] == [201] * 50, [r.text for r in second if r.is_error]
    with fresh_server.client() as c:
        for r in first + second:
            run_id = r.json()["runId"]
            follow(fresh_server.ws, run_id, set(), timeout=300)
            state = c.get(f"/v1/runs/{run_id}").json()
            assert state["status"] == "done", state
    log = fresh_server.log.read_text()
    assert "Traceback" not in log, log[-3000:]


def test_a_reader_sees_the_venv_being_prepared_not_silence(
    fresh_server: Server, tmp_path: Path
) -> None:
    """Issue 26 item 3: while a pack's venv is built on first use, the node's progress says so
    (phase ``preparing``). The stream node holds on a gate until the reader is subscribed, so
    the join node's first call, which builds the basics venv, comes after."""
    from websockets.sync.client import connect

    gate = tmp_path / "subscribed"
    held = {"words": 1, "hold_after": 0, "gate": str(gate)}
    doc = {
        "graph": {
            "schemaVersion": 1,
            "nodes": [
                {"id": "s", "type": "testpack/stream", "params": held},
                {"id": "j", "type": "text/join", "inputs": {
                    "a": {"from": "s", "output": "text"}, "b": {"from": "s", "output": "text"}}},
            ],
        },
        "target": "j",
    }  # fmt: skip
    with fresh_server.client() as c:
        run_id = c.post("/v1/runs", json=doc).json()["runId"]
    seen: list[dict[str, Any]] = []
    with connect(f"{fresh_server.ws}/v1/runs/{run_id}/events", open_timeout=30) as ws:
        assert json.loads(ws.recv(timeout=60))["type"] == "snapshot"
        gate.write_text("open")
        while not seen or seen[-1]["type"] not in ("run_done", "error", "cancelled"):
            seen.append(json.loads(ws.recv(timeout=300)))
    assert seen[-1]["type"] == "run_done", seen[-1]
    preparing = [m for m in seen if m["type"] == "progress" and m["phase"] == "preparing"]
    assert [m["nodeId"] for m in preparing] == ["j"], seen
    assert "Preparing the venv of pack 'basics' (first use" in preparing[0]["status"]
    done = next(i for i, m in enumerate(seen) if m["type"] == "node_done" and m["nodeId"] == "j")
    assert seen.index(preparing[0]) < done


def test_missing_model_folders_fail_at_submit_before_any_venv_is_built(
    fresh_server: Server,
) -> None:
    """Issue 26 item 3: a graph naming model folders that are not installed is a 422 naming
    every one, with the command that fetches it, before the text pack's torch venv is built."""
    doc = {
        "graph": {
            "schemaVersion": 1,
            "nodes": [
                {"id": "p", "type": "input/text", "params": {"text": "hi"}},
                {"id": "c", "type": "text/complete", "params": {"model": "nope"},
                 "inputs": {"prompt": {"from": "p", "output": "text"}}},
                {"id": "r", "type": "text/rewrite", "params": {"model": "gone"},
                 "inputs": {"text": {"from": "c", "output": "text"}}},
            ],
        },
        "target": "r",
    }  # fmt: skip
    with fresh_server.client() as c:
        r = c.post("/v1/runs", json=doc)
    assert r.status_code == 422, r.text
    errors = r.json()["error"]["errors"]
    assert [(e["nodeId"], e["path"]) for e in errors] == [
        ("c", "$.graph.nodes[1].params.model"),
        ("r", "$.graph.nodes[2].params.model"),
    ]
    models = fresh_server.data_dir / "models" / "llm"
    for e, name in zip(errors, ("nope", "gone"), strict=True):
        assert f"model '{name}' is not in {models}" in e["message"], e
        assert f"inline models import hf:ORG/NAME --as {name}" in e["message"], e
    assert "Preparing the venv of pack 'text'" not in fresh_server.log.read_text()


@pytest.fixture(scope="module")
def built_packs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A packs dir whose venvs the first CLI try builds (its first use); later fresh data dirs
    link to it, so only the first try pays for the primitives venv."""
    yield tmp_path_factory.mktemp("first-use-packs")


def cli_render(data: Path, graph: Path, out: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "INLINE_DATA_DIR": str(data),
        "INLINE_MODELS_DIR": str(data / "models"),
    }
    env.pop("INLINE_PACK_PATHS", None)
    return subprocess.run(
        [str(Path(sys.executable).parent / "inline"), "run", str(graph), "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )


def assert_three_loader_errors(i: int, done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 1, (i, done.stdout, done.stderr)
    err = done.stderr
    assert "Traceback" not in err and "ExceptionGroup" not in err, (i, err)
    assert "error: 3 nodes failed:" in err, (i, err)
    for node_id, missing in LOADERS.items():
        assert f"node '{node_id}' (load/" in err and missing in err, (i, node_id, err)
    assert "[8/8]" not in err  # nothing downstream of a failed loader ran


def cli_try(tmp_path: Path, built_packs: Path, i: int) -> subprocess.CompletedProcess[str]:
    """The primitive graph from the CLI on fresh data dir ``i`` whose packs are ``built_packs``."""
    graph = tmp_path / "primitives.json"
    graph.write_text(json.dumps(PRIMITIVES))
    data = tmp_path / f"data-{i}"
    data.mkdir()
    (data / "packs").symlink_to(built_packs, target_is_directory=True)
    return cli_render(data, graph, tmp_path / f"out-{i}")


def test_the_cli_first_render_building_the_venvs_names_every_missing_file(
    tmp_path: Path, built_packs: Path
) -> None:
    """The first render on a fresh data dir, building the venvs it needs: the primitive graph
    without weights ends with the three loaders' errors, each naming its node and file."""
    assert_three_loader_errors(0, cli_try(tmp_path, built_packs, 0))


def test_the_cli_render_on_fresh_data_dirs_names_every_missing_file(
    tmp_path: Path, built_packs: Path
) -> None:
    """19 more times in a row, a fresh data dir (its venvs built by then): the three loaders'
    errors, each naming its node and file, and no traceback; exit 1."""
    for i in range(1, CLI_TRIES):
        assert_three_loader_errors(i, cli_try(tmp_path, built_packs, i))


def test_three_failing_loaders_over_http_end_true(tmp_path: Path, built_packs: Path) -> None:
    """Over HTTP, the same graph: the run's error names the first failed loader and lists all
    three; each loader's state is error with its message, everything downstream skipped, and
    nothing is left queued or running."""
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    data = tmp_path / "data"
    data.mkdir()
    (data / "packs").symlink_to(built_packs, target_is_directory=True)
    server = start_server(data, inputs)
    try:
        with server.client() as c:
            r = c.post("/v1/runs", json=PRIMITIVES)
            assert r.status_code == 201, r.text
            run_id = r.json()["runId"]
            end = follow(server.ws, run_id, set(), timeout=300)
            state = c.get(f"/v1/runs/{run_id}").json()
    finally:
        server.stop()
    assert state["status"] == "error"
    error = state["error"]
    assert error["nodeId"] in LOADERS
    assert {e["nodeId"] for e in error["errors"]} == set(LOADERS)
    assert error["errors"][0]["nodeId"] == error["nodeId"]
    assert error["message"] == error["errors"][0]["message"]
    for failure in error["errors"]:
        assert LOADERS[failure["nodeId"]] in failure["message"]
    if end["type"] == "error":
        assert end["nodeId"] == error["nodeId"] and end["errors"] == error["errors"]
    nodes = state["nodes"]
    for node_id in LOADERS:
        assert nodes[node_id]["state"] == "error"
        assert LOADERS[node_id] in nodes[node_id]["error"]
    assert {nodes[n]["state"] for n in ("c", "s", "d")} == {"skipped"}
    assert {nodes[n]["state"] for n in ("p", "l")} <= {"done", "skipped", "cancelled"}
    assert not {s["state"] for s in nodes.values()} & {"queued", "running"}
    assert "settling failed" not in server.log.read_text()
