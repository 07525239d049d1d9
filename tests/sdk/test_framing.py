"""The worker's buffered frame reader: one receive for what has arrived, frames split from it."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
from inline_sdk import FrameTooLarge, ProtocolError
from inline_sdk._framing import FrameReader
from inline_sdk.protocol import Cancel, FrameCodec, Release, ToWorker


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def frames(*msgs: object) -> bytes:
    codec: FrameCodec[object] = FrameCodec(ToWorker)
    return b"".join(bytes(codec.encode(m)) for m in msgs)


def test_several_frames_sent_at_once_are_read_one_by_one(pair):
    host, worker = pair
    host.sendall(frames(Cancel(id=1), Release(handles=[2, 3]), Cancel(id=4)))
    reader = FrameReader(worker, FrameCodec(ToWorker))
    assert [reader.read() for _ in range(3)] == [
        Cancel(id=1),
        Release(handles=[2, 3]),
        Cancel(id=4),
    ]


def test_frames_arriving_a_byte_at_a_time_are_read_whole(pair):
    host, worker = pair
    data = frames(Release(handles=list(range(50))), Cancel(id=9))

    def trickle() -> None:
        for i in range(len(data)):
            host.sendall(data[i : i + 1])

    writer = threading.Thread(target=trickle)
    writer.start()
    reader = FrameReader(worker, FrameCodec(ToWorker), size=16)
    assert reader.read() == Release(handles=list(range(50)))
    assert reader.read() == Cancel(id=9)
    writer.join()


def test_a_frame_larger_than_the_buffer_grows_it_then_gives_the_room_back(pair):
    host, worker = pair
    big = Release(handles=list(range(100_000)))  # ~300 KiB: more than the socket holds
    writer = threading.Thread(target=host.sendall, args=(frames(big, Cancel(id=1)),))
    writer.start()
    reader = FrameReader(worker, FrameCodec(ToWorker), size=1024)
    assert reader.read() == big
    assert reader.read() == Cancel(id=1)
    writer.join()
    assert len(reader._buf) == 1024


def test_an_oversized_frame_is_refused_before_its_payload(pair):
    host, worker = pair
    host.sendall((1025).to_bytes(4, "big"))
    with pytest.raises(FrameTooLarge):
        FrameReader(worker, FrameCodec(ToWorker, limit=1024)).read()


def test_a_peer_closing_mid_frame_is_a_protocol_error(pair):
    host, worker = pair
    host.sendall(frames(Cancel(id=1)) + (100).to_bytes(4, "big") + b"short")
    host.close()
    reader = FrameReader(worker, FrameCodec(ToWorker))
    assert reader.read() == Cancel(id=1)
    with pytest.raises(ProtocolError, match="closed"):
        reader.read()
