"""The host's frame channel over a worker's socket: frames split as they come, sends without a
lock, the stream's end seen once, and any other byte stream served as before."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import pytest
from anyio.streams.stapled import StapledObjectStream
from inline_host.workers._channel import FrameProtocol, StreamChannel, open_channel
from inline_sdk.protocol import Cancel, Done, FrameCodec, FromWorker, Progress, ToWorker

pytestmark = pytest.mark.anyio


def frames(*msgs: object) -> bytes:
    codec: FrameCodec[object] = FrameCodec(FromWorker)
    return b"".join(bytes(codec.encode(m)) for m in msgs)


class Seen:
    """The messages dispatched, and an event per count reached."""

    def __init__(self) -> None:
        self.msgs: list[Any] = []
        self._wanted: tuple[int, anyio.Event] | None = None

    def __call__(self, msg: Any) -> None:
        self.msgs.append(msg)
        if self._wanted is not None and len(self.msgs) >= self._wanted[0]:
            self._wanted[1].set()

    async def count(self, n: int) -> list[Any]:
        if len(self.msgs) < n:
            self._wanted = (n, anyio.Event())
            with anyio.fail_after(10):
                await self._wanted[1].wait()
        return self.msgs


@pytest.fixture
async def pair() -> AsyncIterator[tuple[anyio.abc.SocketStream, socket.socket]]:
    host, worker = socket.socketpair()
    stream = await anyio.abc.SocketStream.from_socket(host)
    yield stream, worker
    worker.close()
    await stream.aclose()


async def test_a_socket_stream_is_taken_over_and_split_however_its_bytes_come(pair):
    stream, worker = pair
    seen = Seen()
    channel = open_channel(stream, FrameCodec(FromWorker), seen)
    assert isinstance(channel, FrameProtocol)
    msgs = [Progress(id=i, phase="sample", fraction=i / 10, status="x" * i) for i in range(10)]
    data = frames(*msgs)
    worker.sendall(data[:3])  # not even a header
    worker.sendall(data[3:50])  # a frame and a piece of the next
    worker.sendall(data[50:])  # the rest at once: several frames in one read
    assert await seen.count(10) == msgs


async def test_bytes_read_before_the_take_over_are_dispatched_first(pair):
    stream, worker = pair
    worker.sendall(frames(Done(id=1, outputs={})))
    # anyio's protocol reads as soon as the loop runs: let it queue the frame
    with anyio.fail_after(10):
        while not stream._protocol.read_queue:
            await anyio.lowlevel.checkpoint()
    seen = Seen()
    open_channel(stream, FrameCodec(FromWorker), seen)
    worker.sendall(frames(Done(id=2, outputs={})))
    assert await seen.count(2) == [Done(id=1, outputs={}), Done(id=2, outputs={})]


async def test_the_end_of_the_stream_ends_run_after_its_last_frames(pair):
    stream, worker = pair
    seen = Seen()
    channel = open_channel(stream, FrameCodec(FromWorker), seen)
    codec: FrameCodec[Any] = FrameCodec(ToWorker)
    await channel.send(codec.encode(Cancel(id=7)))
    assert codec.check_header(worker.recv(4)) > 0  # it arrived
    worker.sendall(frames(Done(id=7, outputs={})))
    worker.close()
    with anyio.fail_after(10):
        await channel.run()
    assert seen.msgs == [Done(id=7, outputs={})]
    with pytest.raises(anyio.BrokenResourceError):
        await channel.send(codec.encode(Cancel(id=8)))


async def test_an_oversized_or_undecodable_frame_ends_the_stream(pair):
    stream, worker = pair
    seen = Seen()
    channel = open_channel(stream, FrameCodec(FromWorker, limit=1024), seen)
    worker.sendall(frames(Done(id=1, outputs={})) + (2048).to_bytes(4, "big"))
    with anyio.fail_after(10):
        await channel.run()
    assert seen.msgs == [Done(id=1, outputs={})]
    assert worker.recv(1) == b""  # the host's end is closed

    host2, worker2 = socket.socketpair()
    other = await anyio.abc.SocketStream.from_socket(host2)
    channel2 = open_channel(other, FrameCodec(FromWorker), seen)
    worker2.sendall((3).to_bytes(4, "big") + b"\xc1\xc1\xc1")  # not msgpack
    with anyio.fail_after(10):
        await channel2.run()
    worker2.close()
    await other.aclose()


async def test_closing_the_stream_itself_ends_run(pair):
    """What the Ray launcher does when Ray reports the actor dead, and the host on a death."""
    stream, _ = pair
    channel = open_channel(stream, FrameCodec(FromWorker), Seen())
    await stream.aclose()
    with anyio.fail_after(10):
        await channel.run()


async def test_a_send_over_the_high_water_mark_waits_for_the_drain(pair):
    stream, worker = pair
    channel = open_channel(stream, FrameCodec(FromWorker), Seen())
    codec: FrameCodec[Any] = FrameCodec(ToWorker)
    frame = codec.encode(Cancel(id=1)) + bytearray(4 * 1024 * 1024)  # far over the buffers
    sent = anyio.Event()

    async def send() -> None:
        await channel.send(frame)
        sent.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(send)
        await anyio.lowlevel.checkpoint()
        assert not sent.is_set()  # the peer reads nothing yet: the send waits
        got = bytearray()

        def drain() -> None:
            while len(got) < len(frame):
                got.extend(worker.recv(1 << 20))

        await anyio.to_thread.run_sync(drain)
        with anyio.fail_after(10):
            await sent.wait()
    assert got == frame


async def test_any_other_byte_stream_is_read_by_a_task():
    to_host_send, to_host_recv = anyio.create_memory_object_stream[bytes](10)
    from_host_send, from_host_recv = anyio.create_memory_object_stream[bytes](10)
    stream = StapledObjectStream(from_host_send, to_host_recv)
    seen = Seen()
    channel = open_channel(stream, FrameCodec(FromWorker), seen)  # type: ignore[arg-type]
    assert isinstance(channel, StreamChannel)
    data = frames(Done(id=1, outputs={}), Done(id=2, outputs={}))
    async with anyio.create_task_group() as tg:
        tg.start_soon(channel.run)
        await to_host_send.send(data[:5])
        await to_host_send.send(data[5:])
        assert await seen.count(2) == [Done(id=1, outputs={}), Done(id=2, outputs={})]
        await channel.send(b"abc")
        assert await from_host_recv.receive() == b"abc"
        await to_host_send.aclose()
    for s in (to_host_recv, from_host_send, from_host_recv):
        s.close()
