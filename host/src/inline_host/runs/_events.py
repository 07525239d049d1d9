"""A run's /v1 events, typed, and their delivery to many subscribers: encoded once, queued per
subscriber, slow readers coalesced.

Every message of ``WS /v1/runs/{runId}/events`` is one of the tagged structs of ``RunEvent``
(``{"type": ..., "runId": ..., ...}``, camelCase, contract 5.2). Absent fields are ``UNSET``
and left out of the JSON, as the contract's optional fields are. The typed client
(``inline_client``) decodes the same shapes; a test keeps the two equal.

A subscriber's queue never blocks the run: ``progress`` (and ``preview``) events for a node
replace an unsent one of the same node, so a reader that never reads holds at most one progress
per node plus the few events that are never dropped (``node_done`` and the terminal one).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any, Final

import anyio
import msgspec
from msgspec import UNSET, UnsetType

from ._views import NodeFailure, RunState, Take

__all__ = (
    "TERMINAL",
    "Broadcaster",
    "CancelledEvent",
    "DeltaEvent",
    "ErrorEvent",
    "Event",
    "NodeDoneEvent",
    "NodeErrorEvent",
    "PreviewEvent",
    "ProgressEvent",
    "RunDoneEvent",
    "RunEvent",
    "RunStartedEvent",
    "SnapshotEvent",
    "Subscriber",
    "encode_event",
    "events_vocabulary",
)

TERMINAL: Final = frozenset({"run_done", "error", "cancelled"})


class _RunEventBase(msgspec.Struct, frozen=True, rename="camel", tag_field="type"):
    """What every event carries: its ``type`` (the tag, first) and its run."""

    run_id: str


class SnapshotEvent(_RunEventBase, frozen=True, tag="snapshot"):
    """The run's whole state: always the first message of a subscription."""

    state: RunState


class RunStartedEvent(_RunEventBase, frozen=True, tag="run_started"):
    """The run left the queue and began executing."""


class ProgressEvent(_RunEventBase, frozen=True, tag="progress"):
    """A node's progress in its current phase (at most ten a second per run are sent)."""

    node_id: str
    phase: str
    fraction: float
    status: str
    #: Both present exactly when the node reports steps.
    step: int | UnsetType = UNSET
    step_count: int | UnsetType | None = UNSET


class PreviewEvent(_RunEventBase, frozen=True, tag="preview"):
    """A node's preview image, as a ``data:`` URL (our addition)."""

    node_id: str
    image: str


class DeltaEvent(_RunEventBase, frozen=True, tag="delta"):
    """A piece of streamed text of one of a node's outputs (our addition): never dropped."""

    node_id: str
    output: str
    text: str


class NodeDoneEvent(_RunEventBase, frozen=True, tag="node_done"):
    """A take-producing node finished (or was served from the cache) with these takes."""

    node_id: str
    cached: bool
    takes: list[Take]


class NodeErrorEvent(_RunEventBase, frozen=True, tag="node_error"):
    """A node raised (our addition); the run's own ``error`` follows when it ends."""

    node_id: str
    message: str


class RunDoneEvent(_RunEventBase, frozen=True, tag="run_done"):
    """Terminal: the run finished."""


class ErrorEvent(_RunEventBase, frozen=True, tag="error"):
    """Terminal: the run failed. ``nodeId`` is always present (null for a run-level failure);
    ``errors`` (our addition) lists every failed node when more than one did."""

    message: str
    node_id: str | None
    errors: tuple[NodeFailure, ...] | UnsetType = UNSET


class CancelledEvent(_RunEventBase, frozen=True, tag="cancelled"):
    """Terminal: the run was cancelled."""


RunEvent = (
    SnapshotEvent
    | RunStartedEvent
    | ProgressEvent
    | PreviewEvent
    | DeltaEvent
    | NodeDoneEvent
    | NodeErrorEvent
    | RunDoneEvent
    | ErrorEvent
    | CancelledEvent
)

_encoder = msgspec.json.Encoder()


def encode_event(event: RunEvent) -> bytes:
    """The JSON of one event, as the websocket sends it."""
    return _encoder.encode(event)


class Event:
    """One event, encoded once for every subscriber; ``coalesce`` names what a newer event of
    the same kind replaces. ``event`` is the typed event (what in-process readers use)."""

    __slots__ = ("coalesce", "data", "event", "terminal", "type")

    def __init__(self, event: RunEvent | Mapping[str, Any], coalesce: str | None = None) -> None:
        self.data = _encoder.encode(event)
        self.event: RunEvent | None
        if isinstance(event, Mapping):  # raw JSON (as a test or a tool writes it)
            self.type: str = str(event["type"])
            try:
                self.event = msgspec.convert(event, RunEvent)
            except msgspec.ValidationError:
                self.event = None  # not a whole event: sent as it is, read by nobody here
        else:
            self.type = str(type(event).__struct_config__.tag)
            self.event = event
        self.coalesce = coalesce
        self.terminal = self.type in TERMINAL


class Subscriber:
    """One reader's queue of events."""

    def __init__(self) -> None:
        self._queue: deque[Event] = deque()
        self._wake = anyio.Event()
        self.dropped = 0

    def push(self, event: Event) -> None:
        """Queue ``event``, replacing an unsent event it supersedes."""
        if event.coalesce is not None:
            for i, queued in enumerate(self._queue):
                if queued.coalesce == event.coalesce:
                    self._queue[i] = event
                    self.dropped += 1
                    self._wake.set()
                    return
        self._queue.append(event)
        self._wake.set()

    async def next_batch(self) -> list[Event]:
        """Wait for at least one event and take everything queued."""
        while not self._queue:
            await self._wake.wait()
            self._wake = anyio.Event()
        batch = list(self._queue)
        self._queue.clear()
        return batch


class Broadcaster:
    """The subscribers of one run."""

    def __init__(self) -> None:
        self.subscribers: set[Subscriber] = set()

    def subscribe(self) -> Subscriber:
        sub = Subscriber()
        self.subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        self.subscribers.discard(sub)

    def publish(self, event: RunEvent, coalesce: str | None = None) -> None:
        """Send ``event`` to every subscriber (encoded once, only when someone listens)."""
        if not self.subscribers:
            return
        queued = Event(event, coalesce)
        for sub in self.subscribers:
            sub.push(queued)


def _type_name(tp: Any) -> str:
    """A field's type, as the docs show it (``UNSET`` is "optional", not a type)."""
    args = [a for a in getattr(tp, "__args__", ()) if a is not UnsetType]
    origin = getattr(tp, "__origin__", None)
    if origin is None and args:  # a union
        return " or ".join("null" if a is type(None) else _type_name(a) for a in args)
    if origin in (list, tuple):
        return f"list of {_type_name(args[0])}" if args else "list"
    if origin is dict:
        return "object"
    names = {str: "string", int: "integer", float: "number", bool: "boolean"}
    return names.get(tp, getattr(tp, "__name__", str(tp)))


def events_vocabulary() -> str:
    """Markdown: every message type of ``WS /v1/runs/{runId}/events``, its meaning and fields
    (made from the typed events themselves, so the docs cannot drift from them)."""
    lines = [
        "Every message of `WS /v1/runs/{runId}/events` is one JSON object whose `type` says which"
        " of these it is; each carries `runId`. The first is always a `snapshot`; the last is"
        " exactly one of `run_done`, `error` or `cancelled`, then the server closes (1000). An"
        " unknown run closes with 4404. Fields marked optional may be absent.",
        "",
        "| type | meaning | fields |",
        "|---|---|---|",
    ]
    for cls in RunEvent.__args__:
        info = msgspec.inspect.type_info(cls)
        assert isinstance(info, msgspec.inspect.StructType)
        fields = []
        for f in msgspec.structs.fields(cls):
            if f.encode_name == "runId":
                continue
            optional = " (optional)" if f.default is UNSET else ""
            fields.append(f"`{f.encode_name}`: {_type_name(f.type)}{optional}")
        doc = " ".join((cls.__doc__ or "").split()).replace("``", "`")
        tag = info.tag
        lines.append(f"| `{tag}` | {doc} | {'; '.join(fields) or '-'} |")
    return "\n".join(lines)
