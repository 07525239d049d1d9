"""Small helpers for API tests: graphs, submitting, following a run's events."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

import httpx
from websockets.sync.client import connect

TERMINAL = {"run_done", "error", "cancelled"}


def node(
    node_id: str, node_type: str, params: dict[str, Any] | None = None, **inputs: tuple[str, str]
) -> dict[str, Any]:
    out: dict[str, Any] = {"id": node_id, "type": node_type, "params": params or {}}
    if inputs:
        out["inputs"] = {p: {"from": s, "output": o} for p, (s, o) in inputs.items()}
    return out


def body(target: str, *nodes: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"graph": {"schemaVersion": 1, "nodes": list(nodes)}, "target": target, **extra}


def echo_graph(text: str) -> dict[str, Any]:
    return body(
        "e",
        node("t", "input/text", {"text": text}),
        node("e", "testpack/echo", {}, text=("t", "text")),
    )


def events(
    ws_url: str,
    run_id: str,
    timeout: float = 120,
    on_snapshot: Callable[[], object] | None = None,
) -> list[dict[str, Any]]:
    """Every message of a run's stream until the server ends it; ``on_snapshot`` is called once
    the first message (the snapshot: the stream is subscribed) has come."""
    out = []
    with connect(f"{ws_url}/v1/runs/{run_id}/events", open_timeout=30) as ws:
        while True:
            try:
                raw = ws.recv(timeout=timeout)
            except Exception:  # the server closed the stream
                break
            msg = json.loads(raw)
            out.append(msg)
            if on_snapshot is not None and len(out) == 1:
                on_snapshot()
            if msg["type"] in TERMINAL:
                with contextlib.suppress(Exception):
                    ws.recv(timeout=10)
                break
    return out


def run_to_end(client: httpx.Client, ws_url: str, doc: dict[str, Any]) -> dict[str, Any]:
    """Submit, follow the events to the end, return the final state."""
    r = client.post("/v1/runs", json=doc)
    assert r.status_code in (200, 201), r.text
    run_id = r.json()["runId"]
    events(ws_url, run_id)
    return client.get(f"/v1/runs/{run_id}").json()


def block_queue(client: httpx.Client, ws_url: str) -> str:
    """Start a run that holds the queue (on a one-run-at-a-time server) until cancelled; its
    id, once it is running."""
    run_id = client.post(
        "/v1/runs", json=body("w", node("w", "testpack/wait", {"seconds": 120}))
    ).json()["runId"]
    with connect(f"{ws_url}/v1/runs/{run_id}/events") as ws:
        while json.loads(ws.recv(timeout=60))["type"] != "progress":
            pass
    return run_id
