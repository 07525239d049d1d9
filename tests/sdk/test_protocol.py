"""Every protocol message round-trips through msgpack; frames enforce their limit."""

from __future__ import annotations

import socket
import typing

import msgspec
import pytest
from inline_sdk import ComfyMapping, Descriptor, FrameTooLarge, PortSpec, ProtocolError
from inline_sdk import protocol as p

DESCRIPTOR = Descriptor(
    type="acme/x",
    title="X",
    category="Test",
    icon="",
    source="",
    output_kind=None,
    inputs=(),
    outputs=(PortSpec(id="text", label="Text", kind="text", required=False),),
    params=(),
    version="1.0.0",
    params_schema={"type": "object"},
)
ERROR = p.RemoteError(type="ValueError", message="boom", traceback="Traceback...")
MEDIA = p.MediaValue(
    kind="image", ext="png", data=p.ShmRef(segment="s", offset=64, size=10), region=3
)
VALUES: list[p.Value] = [
    p.TextValue(text="hi"),
    MEDIA,
    p.MediaValue(kind="audio", ext="wav", data=p.InlineBytes(data=b"\x00\x01")),
    p.HandleValue(kind="model", id=7),
    p.JsonValue(value={"a": [1, 2.5, None]}),
    p.MediaValue(kind="image", ext="png", data=p.ChunkedRef(blob=4, size=9_000_000)),
]
PLAN = p.ComponentPlan(
    name="/m/z.safetensors", role="diffusion", device="cpu", dtype="fp32", quantization="int8"
)
SAMPLES: list[object] = [
    p.Hello(
        protocol=1,
        host_sdk="1.0.0",
        pack="x",
        shm_prefix="inline-1",
        shm_threshold=1024,
        models_dir="/m",
        assets_dir="/a",
        input_roots=["/r"],
        cwd="/c",
    ),
    p.Call(
        id=1, node="acme/x", node_id="n", params={"w": 3}, inputs={"image": VALUES, "empty": []}
    ),
    p.Cancel(id=1),
    p.Release(handles=[1, 2]),
    p.Shutdown(),
    p.Welcome(
        protocol=1,
        sdk_version="1.0.0",
        pack="x",
        pack_version="0.1.0",
        descriptors=[DESCRIPTOR],
        pid=42,
        comfyui_mappings=[
            ComfyMapping(class_type="Acme", node="acme/x", inputs={"a": "b"}, outputs=["o"])
        ],
    ),
    p.Refused(error=ERROR),
    p.Progress(id=1, phase="sample", fraction=0.5, status="Step 1/2", step=1, step_count=2),
    p.Preview(id=1, image=MEDIA),
    p.Done(id=1, outputs={"image": MEDIA, "text": p.TextValue(text="t")}),
    p.Failed(id=1, error=ERROR),
    p.CallCancelled(id=1),
    p.PlaceAsk(
        ask=1,
        components=[p.ModelSize(name="/m/z.safetensors", role="diffusion", params=6, bytes=12)],
        activation_bytes=918,
    ),
    p.Placed(ask=1, fits=True, reason="fits", components=[PLAN], park_text_encoder=True),
    p.Holding(models=[p.HeldModel(slot="diffusion", name="/m/z.safetensors", bytes=12, plan=PLAN)]),
    p.Evict(slots=["diffusion"]),
    p.Stream(id=1, port="text", text="tok"),
    p.Stats(sections={"batching": {"batches": 1, "sizes": {"4": 1}}}),
    p.BulkChunk(blob=4, data=b"\x00" * 16, last=True),
]


def test_samples_cover_every_message_of_both_unions():
    members = set(typing.get_args(p.ToWorker)) | set(typing.get_args(p.FromWorker))
    assert {type(m) for m in SAMPLES} == members


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).__name__)
def test_every_message_round_trips(msg):
    union = p.ToWorker if type(msg) in typing.get_args(p.ToWorker) else p.FromWorker
    codec = p.FrameCodec(union)
    frame = codec.encode(msg)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert codec.decode(bytes(frame[4:])) == msg
    assert msgspec.json.decode(msgspec.json.encode(msg), type=union) == msg


def test_unknown_fields_are_ignored_so_old_packs_read_new_hosts():
    raw = msgspec.msgpack.encode({"t": "cancel", "id": 5, "added_in_protocol_9": True})
    assert p.FrameCodec(p.ToWorker).decode(raw) == p.Cancel(id=5)


def test_a_message_outside_the_union_is_a_protocol_error():
    raw = msgspec.msgpack.encode({"t": "exec", "code": "import os"})
    with pytest.raises(ProtocolError, match="undecodable"):
        p.FrameCodec(p.ToWorker).decode(raw)


def test_oversized_frame_is_refused_when_sending():
    codec = p.FrameCodec(p.FromWorker, limit=1024)
    big = p.Done(
        id=1,
        outputs={"x": p.MediaValue(kind="image", ext="png", data=p.InlineBytes(data=b"x" * 4096))},
    )
    with pytest.raises(FrameTooLarge) as err:
        codec.encode(big)
    assert err.value.limit == 1024 and err.value.size > 4096


def test_oversized_frame_is_refused_when_receiving_before_reading_it():
    a, b = socket.socketpair()
    try:
        a.sendall((p.MAX_FRAME + 1).to_bytes(4, "big"))  # announce; never send the payload
        with pytest.raises(FrameTooLarge):
            p.recv_frame(b, p.FrameCodec(p.ToWorker))
    finally:
        a.close()
        b.close()


def test_a_peer_closing_mid_frame_is_a_protocol_error():
    a, b = socket.socketpair()
    a.sendall((100).to_bytes(4, "big") + b"short")
    a.close()
    with pytest.raises(ProtocolError, match="closed"):
        p.recv_frame(b, p.FrameCodec(p.ToWorker))
    b.close()


def test_arena_reuses_freed_space_instead_of_growing():
    arena = p.Arena(f"inline-test-arena-{id(object())}", min_segment=1 << 20)
    reader = p.SegmentReader()
    try:
        a = arena.put(b"a" * 1000)
        b = arena.put(b"b" * 5000)
        assert bytes(reader.view(b.ref())) == b"b" * 5000
        arena.free(a)
        arena.free(b)
        assert arena.free_bytes() == 1 << 20  # holes coalesced back into one
        c = arena.put(b"c" * 3000)
        assert (c.segment, c.offset) == (a.segment, 0)
        big = arena.put(b"z" * (2 << 20))  # larger than a segment: a new one
        assert big.segment != c.segment
        assert bytes(reader.view(big.ref())[-3:]) == b"zzz"
    finally:
        arena.close()
