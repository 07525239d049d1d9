"""Issue 22, items 2 and 7: a worker's death or one stalled call costs only what it must.

- Handles made by a worker that died never reach its replacement: the consumer's run computes
  their producer again on the new worker and goes on; a call made right after a kill never
  goes to the dead worker.
- A call past ``INLINE_CALL_TIMEOUT`` is cancelled, not its worker: the worker's other calls
  finish; only a call that ignores the cancel past the grace gets its worker stopped.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from .conftest import Host, finish, gone, node, one, worker

KILL_CYCLES = 100
TERMINAL = ("run_done", "error", "cancelled")


def events(ws_url: str, run_id: str, timeout: float = 60) -> Iterator[dict[str, Any]]:
    """The run's events as they come (the first is its snapshot), until a terminal one."""
    with connect(f"{ws_url}/v1/runs/{run_id}/events", open_timeout=30) as ws:
        while True:
            msg = json.loads(ws.recv(timeout=timeout))
            yield msg
            if msg["type"] in TERMINAL:
                return
            if msg["type"] == "snapshot" and msg["state"]["status"] in ("done", "error"):
                return


def wait_for(check: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)  # polling another process's state, bounded


def submit(client: httpx.Client, doc: dict[str, Any]) -> str:
    r = client.post("/v1/runs", json=doc)
    assert r.status_code in (200, 201), r.text
    return r.json()["runId"]


def text_take(client: httpx.Client, state: dict[str, Any], node_id: str) -> str:
    take = next(t for t in state["takes"] if t["nodeId"] == node_id)
    return client.get(f"/v1/takes/{take['id']}/bytes").text


# item 2: handles of a dead worker ------------------------------------------------------------
def model_graph(label: str, gate: Path) -> dict[str, Any]:
    """m makes a model in the chaos worker; u uses it once g (another pack's worker, held on
    ``gate``) is done: the test kills the chaos worker in between."""
    use = node("u", "chaos/use-model")
    use["inputs"] = {
        "model": {"from": "m", "output": "model"},
        "after": {"from": "g", "output": "image"},
    }
    return {
        "graph": {
            "schemaVersion": 1,
            "nodes": [
                node("m", "chaos/make-model", {"label": label}),
                node("g", "testpack/gate", {"file": str(gate), "tag": label}),
                use,
            ],
        },
        "target": "u",
    }


def wait_node_done(ws_url: str, run_id: str, node_id: str) -> None:
    for msg in events(ws_url, run_id):
        if msg["type"] == "node_done" and msg["nodeId"] == node_id:
            return
        if msg["type"] == "snapshot" and msg["state"]["nodes"][node_id]["state"] == "done":
            return
    raise AssertionError(f"run {run_id} ended before node {node_id} was done")


@pytest.mark.parametrize("noticed", [True, False], ids=["death-noticed", "right-after-kill"])
def test_a_run_whose_handles_died_with_their_worker_makes_them_again(
    host: Host, client: httpx.Client, tmp_path: Path, noticed: bool
) -> None:
    """Five times: the model is made, its worker is killed, then the consumer is called. It
    runs on the new worker with a model that worker made again (never 'handle N is gone', never
    another object under the same id); with ``noticed`` the host saw the death first."""
    for i in range(5):
        label = f"model-{noticed}-{i}-{time.time_ns()}"
        gate = tmp_path / f"gate-{i}"
        run_id = submit(client, model_graph(label, gate))
        wait_node_done(host.ws, run_id, "m")
        dead = worker(client, "chaospack")
        assert dead is not None
        os.kill(dead["pid"], signal.SIGKILL)
        if noticed:
            wait_for(lambda: worker(client, "chaospack") is None, "the dead worker is listed")
        gate.touch()
        for _ in events(host.ws, run_id):
            pass
        state = client.get(f"/v1/runs/{run_id}").json()
        assert state["status"] == "done", (i, state.get("error"), state["nodes"])
        fresh = worker(client, "chaospack")
        assert fresh is not None and fresh["pid"] != dead["pid"]
        got = text_take(client, state, "u")
        # made again by the worker that used it (pids as the worker sees them: in its sandbox's
        # PID namespace, not the host's)
        made = re.fullmatch(rf"{re.escape(label)} made by (\d+) used by (\d+)", got)
        assert made is not None and made[1] == made[2], got


def test_a_call_right_after_a_kill_never_goes_to_the_dead_worker(
    host: Host, client: httpx.Client
) -> None:
    """KILL_CYCLES times: a run on the chaos worker, that worker killed, and at once the next
    run (no wait for the process to end or the host to notice): every run is done (a fifth to
    a third of them failed 'killed while running' on the dead idle worker before: a killed
    worker's main thread is a zombie, and SIGKILL pending before that, while its socket is
    still open)."""
    failed: list[str] = []
    base = time.time_ns()
    for i in range(KILL_CYCLES):
        state = finish(client, host.ws, one("chaos/surrogate", {"nonce": base + i}))
        if state["status"] != "done":
            failed.append(state["error"]["message"])
        live = worker(client, "chaospack")
        if live is not None:  # (a run that failed on a dead worker leaves none)
            os.kill(live["pid"], signal.SIGKILL)
    assert not failed, f"{len(failed)} of {KILL_CYCLES} runs failed: {failed[:3]}"


# item 7: a stalled call, not its worker ------------------------------------------------------
@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    """A chaos host whose calls time out after 10 s, eight runs at once."""
    root = tmp_path_factory.mktemp("timeouts")
    inputs = root / "inputs"
    inputs.mkdir()
    env = {"INLINE_CALL_TIMEOUT": "10", "INLINE_MAX_RUNS": "8", "INLINE_MAX_QUEUED": "8"}
    h = Host(root / "data", inputs, env)
    yield h
    h.server.stop()


def stream_doc(words: int, gate: Path) -> dict[str, Any]:
    """A streamed text that holds after its first word until ``gate`` exists."""
    return one("testpack/stream", {"words": words, "hold_after": 1, "gate": str(gate)})


def streamed(msg: dict[str, Any]) -> bool:
    """Whether an event shows that the stream of node ``n`` sent a piece."""
    if msg["type"] == "snapshot":
        return bool(msg["state"]["nodes"]["n"].get("partial"))
    return msg["type"] == "delta"


def test_a_timed_out_call_is_cancelled_and_its_workers_other_calls_finish(
    quick: Host, tmp_path: Path
) -> None:
    """A cooperative call (testpack/wait) outlives INLINE_CALL_TIMEOUT beside three streams of
    the same worker: it fails with the timeout, saying it was cancelled; the streams finish;
    the worker is the same process."""
    gate = tmp_path / "open"
    with quick.client(timeout=60) as client:
        waiting = submit(client, one("testpack/wait", {"seconds": 600}))
        seen = events(quick.ws, waiting, timeout=30)
        # the streams start five seconds (250 steps of 20 ms at least) into the wait, so the
        # wait's deadline comes first and theirs (five seconds later) only after the gate opens
        for msg in seen:
            if msg["type"] == "progress" and msg.get("step", 0) >= 250:
                break
        else:
            raise AssertionError("the wait ended before its 250th step")
        before = worker(client, "testpack")
        assert before is not None
        streams = [submit(client, stream_doc(3 + i, gate)) for i in range(3)]
        for run_id in streams:  # each is in flight: it streamed its first word and holds
            assert any(streamed(m) for m in events(quick.ws, run_id)), run_id
        end = [m for m in seen if m["type"] in TERMINAL]
        state = client.get(f"/v1/runs/{waiting}").json()
        assert state["status"] == "error", (end, state)
        message = state["error"]["message"]
        assert "did not finish within 10s" in message and "was cancelled" in message, message
        assert "worker was stopped" not in message, message
        gate.touch()
        for i, run_id in enumerate(streams):
            for _ in events(quick.ws, run_id):
                pass
            done = client.get(f"/v1/runs/{run_id}").json()
            assert done["status"] == "done", (i, done.get("error"))
            assert text_take(client, done, "n").count("w") == 3 + i
        after = worker(client, "testpack")
        assert after is not None
        assert (after["pid"], after["generation"]) == (before["pid"], before["generation"])


def test_a_timed_out_call_that_ignores_its_cancel_gets_its_worker_stopped(quick: Host) -> None:
    with quick.client(timeout=60) as client:
        run_id = submit(client, one("chaos/stubborn", {"nonce": time.time_ns()}))
        seen = events(quick.ws, run_id, timeout=30)
        assert any(m["type"] == "progress" for m in seen)
        pid = worker(client, "chaospack")["pid"]
        for _ in seen:
            pass
        state = client.get(f"/v1/runs/{run_id}").json()
        assert state["status"] == "error", state
        message = state["error"]["message"]
        assert "did not finish within 10s" in message and "worker was stopped" in message
        wait_for(lambda: gone(pid), f"worker {pid} still runs past the cancel grace")
