"""The host <-> worker IPC protocol: one closed, tagged union of msgspec Structs per direction.

Evolution rules: new fields get defaults; a field never changes type; ``PROTOCOL`` bumps only on a
breaking change. Wire structs ignore unknown fields, so an old pack can read a newer host.
Bulk bytes above ``Hello.shm_threshold`` travel in shared memory (``ShmRef``), never in a frame;
when host and worker share no memory (the ``shared-memory`` capability is absent on either side),
they travel inline in bounded ``BulkChunk`` frames sent before the message that names them
(``ChunkedRef``).

Capabilities: ``Hello.capabilities`` is what the host understands, ``Welcome.capabilities`` what
the worker does. Neither side sends a message (or a value variant) the other did not announce, so
a pack built on an older 1.x SDK keeps working on a newer host. See ``docs/protocol.md`` in the
SDK for the evolution rules.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import msgspec

from ._comfyui import ComfyMapping
from ._descriptor import Descriptor

#: Bumped only on a breaking change of the wire format.
PROTOCOL: Final = 1

#: The worker may stream partial text (``Stream``); the host shows it as ``delta`` events.
CAP_STREAM: Final = "stream"
#: Bulk bytes may travel through named shared memory (``ShmRef``).
CAP_SHARED_MEMORY: Final = "shared-memory"
#: The host brokers memory: the worker may send ``PlaceAsk``/``Holding`` and gets ``Evict``.
CAP_BROKER: Final = "broker"
#: Bulk bytes may travel inline in bounded chunks (``BulkChunk`` + ``ChunkedRef``).
CAP_CHUNKS: Final = "chunks"
#: The worker may report runtime figures (``Stats``: batches formed, parallel split, compile).
CAP_STATS: Final = "stats"
#: The host may send a ``Call`` with ``warm`` set (SDK 1.7): load what its params pick, run
#: nothing, answer ``Done`` with no outputs.
CAP_WARM: Final = "warm"
#: Largest payload of one ``BulkChunk`` (frames stay far below the 16 MiB frame limit).
CHUNK_SIZE: Final = 4 * 1024 * 1024


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


class ChunkedRef(msgspec.Struct, frozen=True, tag="chunks", tag_field="t"):
    """Bytes sent just before, over the same stream, as ``BulkChunk`` frames of blob ``blob``."""

    blob: int
    size: int


Bulk = ShmRef | InlineBytes | ChunkedRef


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


#: How an uploaded asset's id begins (the rest: its sha256, 64 lowercase hex digits).
ASSET_ID_PREFIX: Final = "sha256-"


def asset_file(assets_dir: Path, asset_id: str) -> Path | None:
    """Where the asset ``asset_id`` lies under ``Hello.assets_dir`` (``<2 hex>/<64 hex>``);
    None when it is no asset id."""
    digest = asset_id.removeprefix(ASSET_ID_PREFIX)
    if (
        not asset_id.startswith(ASSET_ID_PREFIX)
        or len(digest) != 64
        or not all(c in "0123456789abcdef" for c in digest)
    ):
        return None
    return assets_dir / digest[:2] / digest


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
    #: What the host understands (SDK 1.4): ``stream``, ``shared-memory``, ``broker``, ``chunks``.
    #: An older host sends none; the worker then assumes ``shared-memory`` (and ``broker`` as
    #: the flag above says) and never streams.
    capabilities: list[str] = []


class Call(_Msg, frozen=True, tag="call"):
    """Run one node. ``inputs`` maps a port id to its values in edge order."""

    id: int
    node: str
    node_id: str
    params: dict[str, Any]
    inputs: dict[str, list[Value]]
    #: The secrets the node's params name (``api_key_secret``...), by name, for this call only
    #: (SDK 1.4; absent from older hosts). Never logged, never echoed back.
    secrets: dict[str, str] = {}
    #: Warm the node instead of running it (SDK 1.7, capability ``warm``): its warm hook loads
    #: what ``params`` pick (a deployment's model, before its first call); no inputs, no outputs.
    warm: bool = False

    def __repr__(self) -> str:
        # a call may carry secrets: its repr (logs, tracebacks) names them, never their values
        return (
            f"Call(id={self.id}, node={self.node!r}, node_id={self.node_id!r}, "
            f"secrets={sorted(self.secrets)}{', warm=True' if self.warm else ''})"
        )


class Cancel(_Msg, frozen=True, tag="cancel"):
    """Ask a running call to stop at its next cancellation check."""

    id: int


class Release(_Msg, frozen=True, tag="release"):
    """Drop handles (engine objects, shared-memory regions) from the worker's table."""

    handles: list[int]


class Shutdown(_Msg, frozen=True, tag="shutdown"):
    """Finish and exit."""


class BulkChunk(_Msg, frozen=True, tag="chunk"):
    """A piece of blob ``blob`` (either direction, ``chunks`` capability); ``ChunkedRef`` names the
    whole once its last piece is sent."""

    blob: int
    data: bytes
    last: bool = False


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
    #: The sequence-parallel plan (SDK 1.4): ``ulysses=2``, ``ring=2``, ``ulysses=2,ring=2``;
    #: None for one device. ``devices`` lists the group's devices, one per rank.
    parallel: str | None = None
    devices: list[str] = []


class Evict(_Msg, frozen=True, tag="evict"):
    """Free the models in ``slots`` (the broker makes room for another worker's load)."""

    slots: list[str]


ToWorker = Hello | Call | Cancel | Release | Shutdown | Placed | Evict | BulkChunk


# worker -> host -------------------------------------------------------------------------------
class Welcome(_Msg, frozen=True, tag="welcome"):
    """The handshake answer: who the pack is and what nodes it provides."""

    protocol: int
    sdk_version: str
    pack: str
    pack_version: str
    descriptors: list[Descriptor]
    pid: int
    #: What the worker understands (SDK 1.4). A worker of an older SDK sends none: the host then
    #: assumes ``shared-memory`` and ``broker`` as its SDK version tells.
    capabilities: list[str] = []
    #: The pack's ComfyUI mappings (``inline_comfyui_mappings``), for the host's importer.
    comfyui_mappings: list[ComfyMapping] = []


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


class Stream(_Msg, frozen=True, tag="stream"):
    """Partial output of a ``text`` port of a running call (``stream`` capability): ``text`` is
    appended to what was streamed before. Never throttled, coalesced or dropped."""

    id: int
    port: str
    text: str


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


class Stats(_Msg, frozen=True, tag="stats"):
    """The worker's runtime figures by section (``stats`` capability), sent when one changes."""

    sections: dict[str, Any]


FromWorker = (
    Welcome
    | Refused
    | Progress
    | Preview
    | Stream
    | Done
    | Failed
    | CallCancelled
    | PlaceAsk
    | Holding
    | Stats
    | BulkChunk
)
