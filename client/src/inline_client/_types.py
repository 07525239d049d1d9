"""The shapes the client returns: runs, takes, events, completion chunks, images."""

from __future__ import annotations

from typing import Any

import msgspec


class NodeFailure(msgspec.Struct, frozen=True, rename="camel"):
    """One failed node of a run."""

    node_id: str
    message: str


class RunError(msgspec.Struct, frozen=True, rename="camel"):
    """Why a run failed: the first failed node's message; ``errors`` lists every failed node
    when more than one did."""

    message: str
    node_id: str | None = None
    errors: list[NodeFailure] | None = None


class Take(msgspec.Struct, frozen=True, rename="camel"):
    """An immutable render (``/v1/takes/{id}``)."""

    id: str
    run_id: str
    node_id: str
    kind: str
    uri: str
    hash: str
    params: dict[str, Any] = {}
    created_at: int = 0


class RunState(msgspec.Struct, frozen=True, rename="camel"):
    """A run's state (``/v1/runs/{id}``)."""

    run_id: str
    status: str
    target: str
    fraction: float = 0.0
    nodes: dict[str, Any] = {}
    takes: list[Take] = []
    error: RunError | None = None

    @property
    def finished(self) -> bool:
        return self.status in ("done", "error", "cancelled")


# events of WS /v1/runs/{id}/events ----------------------------------------------------------
class Snapshot(msgspec.Struct, frozen=True, tag="snapshot", rename="camel"):
    run_id: str
    state: RunState


class RunStarted(msgspec.Struct, frozen=True, tag="run_started", rename="camel"):
    run_id: str


class Progress(msgspec.Struct, frozen=True, tag="progress", rename="camel"):
    run_id: str
    node_id: str
    phase: str = ""
    fraction: float = 0.0
    status: str = ""
    step: int | None = None
    step_count: int | None = None


class Preview(msgspec.Struct, frozen=True, tag="preview", rename="camel"):
    run_id: str
    node_id: str
    image: str


class Delta(msgspec.Struct, frozen=True, tag="delta", rename="camel"):
    """A streamed piece of a text output."""

    run_id: str
    node_id: str
    output: str
    text: str


class NodeDone(msgspec.Struct, frozen=True, tag="node_done", rename="camel"):
    run_id: str
    node_id: str
    cached: bool = False
    takes: list[Take] = []


class NodeFailed(msgspec.Struct, frozen=True, tag="node_error", rename="camel"):
    """A node raised (the run's ``Failed`` follows when it ends)."""

    run_id: str
    node_id: str
    message: str = ""


class RunDone(msgspec.Struct, frozen=True, tag="run_done", rename="camel"):
    run_id: str


class Failed(msgspec.Struct, frozen=True, tag="error", rename="camel"):
    run_id: str
    message: str = ""
    node_id: str | None = None
    #: Every failed node, when more than one did.
    errors: list[NodeFailure] | None = None


class Cancelled(msgspec.Struct, frozen=True, tag="cancelled", rename="camel"):
    run_id: str


class Other(msgspec.Struct, frozen=True):
    """An event type this client does not know (a newer server)."""

    type: str
    data: dict[str, Any]


Event = (
    Snapshot
    | RunStarted
    | Progress
    | Preview
    | Delta
    | NodeDone
    | NodeFailed
    | RunDone
    | Failed
    | Cancelled
)
TERMINAL = (RunDone, Failed, Cancelled)
_event = msgspec.json.Decoder(Event)


def decode_event(raw: bytes | str) -> Event | Other:
    """One websocket message as a typed event."""
    try:
        return _event.decode(raw)
    except msgspec.ValidationError:
        data = msgspec.json.decode(raw)
        return Other(type=str(data.get("type", "")), data=data)


# results --------------------------------------------------------------------------------------
class ToolCall(msgspec.Struct, frozen=True):
    """A tool the model called; ``arguments`` is JSON text."""

    id: str
    name: str
    arguments: str


class CompletionChunk(msgspec.Struct, frozen=True):
    """One streamed piece of a completion; the last one carries ``finish_reason``."""

    content: str = ""
    thinking: str = ""
    tool_calls: list[ToolCall] = []
    finish_reason: str | None = None

    @property
    def has_text(self) -> bool:
        """Whether this chunk carries content text."""
        return bool(self.content)


class GeneratedImage(msgspec.Struct, frozen=True):
    """An image take: its PNG bytes, size and the params it was made with."""

    image: bytes
    width: int
    height: int
    params: dict[str, Any]
    take: Take


class GeneratedMesh(msgspec.Struct, frozen=True):
    """A mesh take: its binary glTF bytes, vertex and face counts, and the params it was made
    with."""

    glb: bytes
    vertices: int
    faces: int
    params: dict[str, Any]
    take: Take
