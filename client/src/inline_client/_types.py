"""The shapes the client returns: runs, takes, events, completion chunks, images, downloads,
local models and deployments."""

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
    #: the node's output port it came from ("" from a server before 2026-12)
    output: str = ""
    #: where its bytes are served, relative to the server ("" from a server before 2026-12)
    url: str = ""


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


# models and deployments -------------------------------------------------------------------------
class DownloadFile(msgspec.Struct, frozen=True, rename="camel"):
    """One file of a download: where it comes from and goes, bytes done of total, state
    (``waiting``, ``downloading``, ``done``)."""

    path: str
    repo: str
    dest: str
    bytes_done: int = 0
    bytes_total: int | None = None
    state: str = "waiting"


class Download(msgspec.Struct, frozen=True, rename="camel"):
    """A download (``/v1/downloads/{id}``): its source, state (``queued``, ``running``,
    ``done``, ``failed``, ``cancelled``), where the model lands, and its progress per file."""

    download_id: str
    source: str
    state: str
    dest: str | None = None
    bytes_done: int = 0
    bytes_total: int = 0
    files: list[DownloadFile] = []
    error: str | None = None
    created_at: float = 0.0

    @property
    def finished(self) -> bool:
        return self.state in ("done", "failed", "cancelled")


class LocalModel(msgspec.Struct, frozen=True):
    """A model of the server's ``models/`` (``/v1/models/local``): its name (what a node's
    picker offers), category, folder and path, bytes, source, whether it is complete and
    whether a deployment serves it, and (``show_model``) its card (``inline.json``)."""

    name: str
    category: str
    folder: str
    path: str
    bytes: int
    source: str | None = None
    complete: bool = True
    deployed: bool = False
    card: dict[str, Any] | None = None


class Replica(msgspec.Struct, frozen=True, rename="camel"):
    """One replica of a deployment: its process, where it runs, ``starting``/``ready``/``busy``."""

    pid: int | None
    generation: int
    where: str
    state: str
    calls_in_flight: int = 0


class Autoscaling(msgspec.Struct, frozen=True):
    """How a deployment between ``min`` and ``max`` follows its calls."""

    target_ongoing: float = 1.0
    upscale_delay_s: float = 0.0
    downscale_delay_s: float = 30.0
    idle_s: float = 300.0


class Decision(msgspec.Struct, frozen=True, rename="camel"):
    """One scaling decision of a deployment."""

    at: int
    replicas_from: int
    replicas_to: int
    reason: str


class Deployment(msgspec.Struct, frozen=True, rename="camel"):
    """A deployment (``/v1/deployments/{name}``): the node (and model) it serves, its size
    (``min``..``max``, ``target`` now), state (``deploying``, ``ready``, ``failing: ...``),
    load and queue, its replicas and its latest scaling decisions."""

    name: str
    node: str
    pack: str
    model: str | None
    min: int
    max: int
    target: int
    state: str
    load: int = 0
    queue: int = 0
    replicas: list[Replica] = []
    autoscaling: Autoscaling | None = None
    decisions: list[Decision] = []
    created_at: int = 0
