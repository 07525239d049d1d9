"""The host <-> worker IPC protocol: one closed, tagged union of msgspec Structs per direction.

Evolution rules: new fields get defaults; a field never changes type; ``PROTOCOL`` bumps only on a
breaking change. Wire structs ignore unknown fields, so an old pack can read a newer host.
Bulk bytes above ``Hello.shm_threshold`` travel in shared memory (``ShmRef``), never in a frame.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from ._descriptor import Descriptor

#: Bumped only on a breaking change of the wire format.
PROTOCOL: Final = 1


class _Msg(msgspec.Struct, frozen=True, tag_field="t", forbid_unknown_fields=False):
    pass


# values --------------------------------------------------------------------------------------
class ShmRef(msgspec.Struct, frozen=True, tag="shm", tag_field="t"):
    """Bytes in a named shared-memory segment: ``segment`` at ``offset``, ``size`` long."""

    segment: str
    offset: int
    size: int


class InlineBytes(msgspec.Struct, frozen=True, tag="inline", tag_field="t"):
    """Bytes small enough to travel inside the frame."""

    data: bytes


Bulk = ShmRef | InlineBytes


class TextValue(msgspec.Struct, frozen=True, tag="text", tag_field="t"):
    """A ``text`` port value."""

    text: str


class MediaValue(msgspec.Struct, frozen=True, tag="media", tag_field="t"):
    """Encoded media (``kind`` image/video/audio/mask) with its file extension.

    ``region`` is the handle of the shared-memory region in the producing worker's table, so the
    host can release it; ``None`` for inline bytes. ``params`` are the take params the node
    recorded (added in SDK 1.2; absent from older packs).
    """

    kind: str
    ext: str
    data: Bulk
    region: int | None = None
    params: dict[str, Any] | None = None


class HandleValue(msgspec.Struct, frozen=True, tag="handle", tag_field="t"):
    """An engine object (model, latent...) kept in the producing worker's handle table."""

    kind: str
    id: int


class JsonValue(msgspec.Struct, frozen=True, tag="json", tag_field="t"):
    """Any other plain value."""

    value: Any


Value = TextValue | MediaValue | HandleValue | JsonValue


class RemoteError(msgspec.Struct, frozen=True):
    """An exception raised in the worker, as data: never a pickled exception object."""

    type: str
    message: str
    traceback: str = ""


# host -> worker -------------------------------------------------------------------------------
class Hello(_Msg, frozen=True, tag="hello"):
    """First message: the host's protocol and the worker's configuration."""

    protocol: int
    host_sdk: str
    pack: str
    shm_prefix: str
    shm_threshold: int
    models_dir: str
    assets_dir: str
    input_roots: list[str]
    cwd: str
    max_threads: int = 8
    #: The host brokers memory (SDK 1.3): the worker may send ``PlaceAsk`` and ``Holding``.
    broker: bool = False


class Call(_Msg, frozen=True, tag="call"):
    """Run one node. ``inputs`` maps a port id to its values in edge order."""

    id: int
    node: str
    node_id: str
    params: dict[str, Any]
    inputs: dict[str, list[Value]]


class Cancel(_Msg, frozen=True, tag="cancel"):
    """Ask a running call to stop at its next cancellation check."""

    id: int


class Release(_Msg, frozen=True, tag="release"):
    """Drop handles (engine objects, shared-memory regions) from the worker's table."""

    handles: list[int]


class Shutdown(_Msg, frozen=True, tag="shutdown"):
    """Finish and exit."""


# memory (SDK 1.3) -----------------------------------------------------------------------------
class ModelSize(msgspec.Struct, frozen=True):
    """One component a worker is about to load: what its header says (never its weights)."""

    name: str
    role: str
    params: int
    bytes: int
    #: The worker's slot it will replace (``diffusion``, ``vae``...): what that slot holds now
    #: is freed before the load, so it does not count against the room.
    slot: str = ""


class ComponentPlan(msgspec.Struct, frozen=True):
    """How the host's policy places one component."""

    name: str
    role: str
    device: str
    dtype: str
    quantization: str = "none"
    offload: str = "resident"
    bytes: int = 0


class HeldModel(msgspec.Struct, frozen=True):
    """A model a worker keeps loaded, with the plan it was loaded under."""

    slot: str
    name: str
    bytes: int
    plan: ComponentPlan
    last_used: float = 0.0


class Placed(_Msg, frozen=True, tag="placed"):
    """The broker's answer to ``PlaceAsk`` ``ask``: a plan per component, or why it won't fit."""

    ask: int
    fits: bool
    reason: str
    components: list[ComponentPlan] = []
    park_text_encoder: bool = False
    vae_tiling: bool = False
    attention: str = "sdpa"


class Evict(_Msg, frozen=True, tag="evict"):
    """Free the models in ``slots`` (the broker makes room for another worker's load)."""

    slots: list[str]


ToWorker = Hello | Call | Cancel | Release | Shutdown | Placed | Evict


# worker -> host -------------------------------------------------------------------------------
class Welcome(_Msg, frozen=True, tag="welcome"):
    """The handshake answer: who the pack is and what nodes it provides."""

    protocol: int
    sdk_version: str
    pack: str
    pack_version: str
    descriptors: list[Descriptor]
    pid: int


class Refused(_Msg, frozen=True, tag="refused"):
    """The worker cannot serve (protocol mismatch, pack failed to load or declare its nodes)."""

    error: RemoteError


class Progress(_Msg, frozen=True, tag="progress"):
    """Progress of a running call."""

    id: int
    phase: str
    fraction: float
    status: str = ""
    step: int | None = None
    step_count: int | None = None


class Preview(_Msg, frozen=True, tag="preview"):
    """A small preview image of a running call."""

    id: int
    image: MediaValue


class Done(_Msg, frozen=True, tag="done"):
    """A call finished; ``outputs`` maps output port ids to values."""

    id: int
    outputs: dict[str, Value]


class Failed(_Msg, frozen=True, tag="failed"):
    """A call raised."""

    id: int
    error: RemoteError


class CallCancelled(_Msg, frozen=True, tag="cancelled"):
    """A call stopped because it was cancelled."""

    id: int


class PlaceAsk(_Msg, frozen=True, tag="place"):
    """Before loading: where and how should these components go? (answered by ``Placed``)."""

    ask: int
    components: list[ModelSize]
    activation_bytes: int = 0


class Holding(_Msg, frozen=True, tag="holding"):
    """What the worker keeps loaded now (sent after every load, drop and eviction)."""

    models: list[HeldModel]


FromWorker = (
    Welcome | Refused | Progress | Preview | Done | Failed | CallCancelled | PlaceAsk | Holding
)
