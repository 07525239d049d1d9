"""Our responses against the reference's recorded transcripts, key by key (the contract's own
examples are the fixtures): same keys, same order, same JSON types; additions only where the
contract allows them (`errors` on 422s)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.client import connect

from ._helpers import block_queue, body, echo_graph, node

T = json.loads((Path(__file__).parents[1] / "data" / "contract_transcripts.json").read_text())
OPTIONAL = {"etaMs"}  # progress fields the reference's runners may omit
#: Our additions to a take, after the contract's fields (issue 26): its output port, its URL.
TAKE_ADDITIONS = ("output", "url")


def shape(value: Any) -> Any:
    """Keys (in order) and JSON types, recursively; lists by their first element."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items() if k not in OPTIONAL}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    if isinstance(value, bool) or value is None:
        return type(value).__name__
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


def same_shape(ours: Any, reference: Any, *, params_free: bool = True) -> None:
    a, b = shape(ours), shape(reference)
    _drop_take_additions(a)
    if params_free:  # take params are runner-defined
        _drop_params(a)
        _drop_params(b)
    assert a == b, f"\nours:      {a}\nreference: {b}"
    if isinstance(ours, dict):
        ours_keys = [k for k in ours if k not in OPTIONAL]
        if "uri" in ours and "createdAt" in ours:  # a take: our additions come last
            assert ours_keys[-len(TAKE_ADDITIONS) :] == list(TAKE_ADDITIONS), ours_keys
            ours_keys = ours_keys[: -len(TAKE_ADDITIONS)]
        assert ours_keys == [k for k in reference if k not in OPTIONAL]


def _drop_take_additions(s: Any) -> None:
    """Our additions to each take, checked to come last (after ``createdAt``), then dropped."""
    if isinstance(s, dict):
        if "uri" in s and "createdAt" in s:
            keys = list(s)
            assert keys[-len(TAKE_ADDITIONS) :] == list(TAKE_ADDITIONS), keys
            for k in TAKE_ADDITIONS:
                s.pop(k)
        for v in s.values():
            _drop_take_additions(v)
    elif isinstance(s, list):
        for v in s:
            _drop_take_additions(v)


def _drop_params(s: Any) -> None:
    if isinstance(s, dict):
        s.pop("params", None)
        for v in s.values():
            _drop_params(v)
    elif isinstance(s, list):
        for v in s:
            _drop_params(v)


@pytest.fixture(scope="module")
def finished_with_take(server):
    """A run of a take-producing, multi-step node after a source node (like the reference's)."""
    doc = body(
        "s",
        node("p", "input/text", {"text": "a cat"}),
        node("s", "testpack/spam", {"events": 6}, prompt=("p", "text")),
    )
    with server.client() as client:
        # hold the (one-run) queue until we listen, so that no event can pass unseen
        blocker = block_queue(client, server.ws)
        run_id = client.post("/v1/runs", json=doc).json()["runId"]
        with connect(f"{server.ws}/v1/runs/{run_id}/events") as ws:
            msgs = [json.loads(ws.recv(timeout=60))]
            assert msgs[0]["state"]["status"] == "queued"
            client.delete(f"/v1/runs/{blocker}")
            while msgs[-1]["type"] not in ("run_done", "error"):
                msgs.append(json.loads(ws.recv(timeout=60)))
    return run_id, msgs


def test_submit_and_replay_bodies(client):
    doc = echo_graph("transcripts") | {"clientRunId": "t-1"}
    r = client.post("/v1/runs", json=doc)
    assert r.status_code == T["submit_ok"]["status"]
    same_shape(r.json(), T["submit_ok"]["body"])
    again = client.post("/v1/runs", json=doc)
    assert again.status_code == T["submit_again"]["status"]
    same_shape(again.json(), T["submit_again"]["body"])
    conflict = client.post("/v1/runs", json=echo_graph("other") | {"clientRunId": "t-1"})
    assert conflict.status_code == T["submit_conflict"]["status"]
    same_shape(conflict.json(), T["submit_conflict"]["body"])


def test_run_state_take_and_events(client, server, finished_with_take):
    run_id, msgs = finished_with_take
    state = client.get(f"/v1/runs/{run_id}").json()
    same_shape(state, T["get_run_done"]["body"])
    take = state["takes"][0]
    same_shape(client.get(f"/v1/takes/{take['id']}").json(), T["take"]["body"])
    ref_types = [m.get("type") for m in T["ws_msgs"] if "type" in m]
    ours = {m["type"]: m for m in msgs}
    for ref in T["ws_msgs"]:
        if "type" in ref and ref["type"] != "snapshot":
            same_shape(ours[ref["type"]], ref)
    assert msgs[0]["type"] == "snapshot"
    assert set(msgs[0]) == {"type", "runId", "state"}
    assert [m["type"] for m in msgs][-2:] == ref_types[-2:]  # node_done, run_done
    bytes_ = client.get(f"/v1/takes/{take['id']}/bytes")
    assert bytes_.status_code == 200
    for header in ("content-type", "accept-ranges", "content-length", "last-modified", "etag"):
        assert header in bytes_.headers


def test_cached_rerun_matches(client, server, finished_with_take):
    doc = body(
        "s",
        node("p", "input/text", {"text": "a cat"}),
        node("s", "testpack/spam", {"events": 6}, prompt=("p", "text")),
    )
    r = client.post("/v1/runs", json=doc)
    assert r.status_code == T["submit_cached"]["status"]
    state = client.get(f"/v1/runs/{r.json()['runId']}").json()
    same_shape(state, T["get_run_cached"]["body"])
    assert state["nodes"]["s"] == {"state": "cached", "fraction": 1.0}


@pytest.mark.parametrize(
    ("name", "method", "path"),
    [
        ("take_404", "get", "/v1/takes/nope"),
        ("take_bytes_404", "get", "/v1/takes/nope/bytes"),
        ("get_run_404", "get", "/v1/runs/run_nope"),
        ("cancel_404", "delete", "/v1/runs/run_nope"),
        ("models_slash", "get", "/v1/models/"),
        ("unknown_route", "get", "/v1/nothing"),
        ("method_not_allowed", "put", "/v1/health"),
        ("list_runs_empty", "get", "/v1/runs"),
    ],
)
def test_error_and_empty_bodies(client, name, method, path):
    r = getattr(client, method)(path)
    assert r.status_code == T[name]["status"]
    if name == "list_runs_empty":
        assert list(r.json()) == ["runs"]
    elif name in ("unknown_route", "method_not_allowed"):
        # ours (issue 11): the contract's envelope, where the reference answers {"detail"}
        assert list(T[name]["body"]) == ["detail"]
        assert r.json()["error"]["code"] == name.replace("unknown_route", "not_found")
    else:
        assert r.json() == T[name]["body"]


def test_assets_and_validation_envelopes(client):
    for name, ctype in (
        ("asset_png", "image/png"),
        ("asset_video", "video/mp4"),
        ("asset_audio", "audio/wav"),
        ("asset_noct", None),
    ):
        headers = {"Content-Type": ctype} if ctype else {}
        r = client.post("/v1/assets", content=b"\x89PNG\r\n\x1a\n", headers=headers)
        assert r.status_code == T[name]["status"]
        same_shape(r.json(), T[name]["body"])
        # ours (issue 11): the kind comes from the bytes (a PNG), not the Content-Type header
        assert r.json()["kind"] == "image"
    bad = client.post("/v1/runs", json=body("e", node("e", "text/join", {})))
    ref = T["submit_missing_req2"]
    assert bad.status_code == ref["status"]
    envelope = bad.json()["error"]
    assert {k: envelope[k] for k in ref["body"]["error"]}.keys() == ref["body"]["error"].keys()
    assert envelope["code"] == "invalid_graph" and "errors" in envelope
