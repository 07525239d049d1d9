"""The /v1 run events: the host's typed structs (``inline_host.runs``) write the contract's JSON
exactly (key order, camelCase, optional keys left out), and the client's event types
(``inline_client``) read every field of every one of them: the same tags, the same fields."""

from __future__ import annotations

import json
import typing
from typing import Any

import inline_client
import msgspec
import pytest
from inline_client._types import decode_event
from inline_host.runs import RunEvent, encode_event
from inline_host.runs._events import (
    CancelledEvent,
    DeltaEvent,
    ErrorEvent,
    Event,
    NodeDoneEvent,
    NodeErrorEvent,
    PreviewEvent,
    ProgressEvent,
    RunDoneEvent,
    RunStartedEvent,
    SnapshotEvent,
)
from inline_host.runs._views import NodeFailure, NodeState, RunError, RunState, Take

TAKE = Take(id="take_0123456789ab", run_id="run_0123456789ab", node_id="n", kind="image",
            uri="takes/take_0123456789ab.png", hash="sha256-00", params={"seed": 7},
            created_at=1700000000000, output="image",
            url="/v1/takes/take_0123456789ab/bytes")  # fmt: skip
FAILURES = (NodeFailure("a", "A"), NodeFailure("b", "B"))
NODE = NodeState(state="running", fraction=0.5, phase="sample", step=2, step_count=4,
                 status="Step 2/4", partial={"text": "Hel"}, error="why")  # fmt: skip
STATE = RunState(run_id="r", status="error", target="n", fraction=0.5, nodes={"n": NODE},
                 takes=[TAKE], error=RunError("a", "A", FAILURES))  # fmt: skip

#: One of each event, every optional field present.
WHOLE: list[Any] = [
    SnapshotEvent(run_id="r", state=STATE),
    RunStartedEvent(run_id="r"),
    ProgressEvent(
        run_id="r",
        node_id="n",
        phase="sample",
        fraction=0.5,
        status="Step 2/4",
        step=2,
        step_count=4,
    ),
    PreviewEvent(run_id="r", node_id="n", image="data:image/png;base64,AA=="),
    DeltaEvent(run_id="r", node_id="n", output="text", text="wörd\n"),
    NodeDoneEvent(run_id="r", node_id="n", cached=True, takes=[TAKE]),
    NodeErrorEvent(run_id="r", node_id="n", message="boom"),
    RunDoneEvent(run_id="r"),
    ErrorEvent(run_id="r", message="A", node_id="a", errors=FAILURES),
    CancelledEvent(run_id="r"),
]


def tag(cls: type) -> object:
    return cls.__struct_config__.tag  # type: ignore[attr-defined]


def test_every_event_type_is_sampled() -> None:
    assert {type(e) for e in WHOLE} == set(typing.get_args(RunEvent))


@pytest.mark.parametrize(
    ("event", "wire"),
    [
        (RunStartedEvent(run_id="r"), '{"type":"run_started","runId":"r"}'),
        (
            ProgressEvent(run_id="r", node_id="n", phase="load", fraction=0.25, status=""),
            '{"type":"progress","runId":"r","nodeId":"n","phase":"load","fraction":0.25,'
            '"status":""}',
        ),
        (
            ProgressEvent(
                run_id="r",
                node_id="n",
                phase="sample",
                fraction=1.0,
                status="s",
                step=3,
                step_count=None,
            ),
            '{"type":"progress","runId":"r","nodeId":"n","phase":"sample","fraction":1.0,'
            '"status":"s","step":3,"stepCount":null}',
        ),
        (
            DeltaEvent(run_id="r", node_id="n", output="text", text="wörd\n"),
            '{"type":"delta","runId":"r","nodeId":"n","output":"text","text":"wörd\\n"}',
        ),
        (
            NodeDoneEvent(run_id="r", node_id="n", cached=False, takes=[TAKE]),
            '{"type":"node_done","runId":"r","nodeId":"n","cached":false,"takes":[{"id":'
            '"take_0123456789ab","runId":"run_0123456789ab","nodeId":"n","kind":"image","uri":'
            '"takes/take_0123456789ab.png","hash":"sha256-00","params":{"seed":7},'
            '"createdAt":1700000000000,"output":"image","url":"/v1/takes/take_0123456789ab/bytes"}]}',
        ),
        (
            NodeErrorEvent(run_id="r", node_id="n", message="boom"),
            '{"type":"node_error","runId":"r","nodeId":"n","message":"boom"}',
        ),
        (
            ErrorEvent(run_id="r", message="Storage failed", node_id=None),
            '{"type":"error","runId":"r","message":"Storage failed","nodeId":null}',
        ),
        (
            ErrorEvent(run_id="r", message="A", node_id="a", errors=FAILURES),
            '{"type":"error","runId":"r","message":"A","nodeId":"a","errors":[{"nodeId":"a",'
            '"message":"A"},{"nodeId":"b","message":"B"}]}',
        ),
        (RunDoneEvent(run_id="r"), '{"type":"run_done","runId":"r"}'),
        (CancelledEvent(run_id="r"), '{"type":"cancelled","runId":"r"}'),
    ],
)
def test_the_wire_is_the_contracts(event: Any, wire: str) -> None:
    assert encode_event(event).decode() == wire
    queued = Event(event)  # encoded once, for every subscriber
    assert (queued.data, queued.type, queued.event) == (wire.encode(), tag(type(event)), event)


def test_the_snapshot_is_the_state_under_its_run() -> None:
    data = json.loads(encode_event(SnapshotEvent(run_id="r", state=STATE)))
    assert list(data) == ["type", "runId", "state"]
    assert data["state"] == json.loads(msgspec.json.encode(STATE))  # as GET /v1/runs/{id}


def test_the_client_knows_every_event_type_the_host_sends() -> None:
    client = {tag(t) for t in typing.get_args(inline_client.Event)}
    assert client == {tag(t) for t in typing.get_args(RunEvent)}


@pytest.mark.parametrize("event", WHOLE, ids=lambda e: str(tag(type(e))))
def test_the_client_reads_every_field(event: Any) -> None:
    """Decoded with the client's types and encoded again, a whole event is what the host
    sent: the client has each of its fields (and no other)."""
    wire = encode_event(event)
    read = decode_event(wire)
    assert not isinstance(read, inline_client.Other)
    assert tag(type(read)) == tag(type(event))
    assert msgspec.to_builtins(read) == json.loads(wire)


@pytest.mark.parametrize(
    "event",
    [
        ProgressEvent(run_id="r", node_id="n", phase="p", fraction=0.0, status=""),
        ErrorEvent(run_id="r", message="m", node_id=None),
        SnapshotEvent(
            run_id="r",
            state=RunState(
                run_id="r",
                status="queued",
                target="n",
                fraction=0.0,
                nodes={"n": NodeState(state="queued", fraction=0.0)},
                takes=[],
                error=None,
            ),
        ),
    ],
    ids=lambda e: str(tag(type(e))),
)
def test_the_client_reads_events_without_their_optional_fields(event: Any) -> None:
    read = decode_event(encode_event(event))
    assert tag(type(read)) == tag(type(event))
