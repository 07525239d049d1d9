"""The host's end of one worker's byte stream: whole frames out, decoded messages in.

On asyncio, a stream that is anyio's socket stream (what the local, TCP and Ray launchers give)
is taken over: its transport gets a ``FrameProtocol``, whose ``data_received`` splits frames
and hands each message to the worker's dispatch at once (no reader task woken per frame, no
pause and resume of reading around every wait), and a frame goes out in one
``transport.write`` (atomic on the loop thread: no lock, no copy), waiting only while the
transport is above its high-water mark. Any other byte stream is read by a task and written
under a lock. Either way ``run`` returns when the stream has ended, after every message that
came before its end was dispatched.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, Protocol, cast

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream
from inline_sdk import FrameTooLarge, ProtocolError
from inline_sdk.protocol import HEADER, FrameCodec

try:  # what anyio asks first which async library runs (where sniffio is installed)
    from sniffio import current_async_library_cvar as LIBRARY
except ModuleNotFoundError:  # then anyio asks asyncio for its running loop, which works anyway
    LIBRARY = None

#: Called with each message, in the order the worker sent them.
Dispatch = Callable[[Any], None]


class Channel(Protocol):
    """Frames to and messages from one worker."""

    async def run(self) -> None:
        """Until the stream ends (its messages are dispatched meanwhile)."""
        ...

    async def send(self, frame: bytes | bytearray) -> None:
        """Send one whole frame; raises ``anyio.BrokenResourceError`` once the stream ended."""
        ...


def open_channel(
    stream: anyio.abc.ByteStream, codec: FrameCodec[Any], dispatch: Dispatch
) -> Channel:
    """The channel over ``stream``: a frame protocol on its transport where it has one (from
    now on only ``aclose`` may be called on ``stream`` itself), a reader task otherwise."""
    transport = getattr(stream, "_transport", None)
    old = getattr(stream, "_protocol", None)
    if all(hasattr(transport, name) for name in _TRANSPORT) and hasattr(old, "read_queue"):
        # asyncio's own transports, and uvloop's (which are no asyncio.Transport subclasses)
        return FrameProtocol.take_over(cast(asyncio.Transport, transport), old, codec, dispatch)
    return StreamChannel(stream, codec, dispatch)


#: What the frame protocol asks of the transport it takes over.
_TRANSPORT = (
    "set_protocol",
    "write",
    "is_closing",
    "abort",
    "close",
    "resume_reading",
    "set_write_buffer_limits",
)


class FrameProtocol(asyncio.Protocol):
    """Splits frames as they arrive and dispatches each; sends through its transport."""

    def __init__(self, codec: FrameCodec[Any], dispatch: Dispatch) -> None:
        self._codec = codec
        self._dispatch = dispatch
        self._buf = bytearray()
        self._transport: asyncio.Transport | None = None
        self._ended = asyncio.get_running_loop().create_future()
        self._writable: asyncio.Future[None] | None = None

    @classmethod
    def take_over(
        cls,
        transport: asyncio.Transport,
        old: Any,
        codec: FrameCodec[Any],
        dispatch: Dispatch,
    ) -> FrameProtocol:
        """Become ``transport``'s protocol, taking what ``old`` (anyio's) had read already."""
        proto = cls(codec, dispatch)
        proto._transport = transport
        transport.set_protocol(proto)
        transport.set_write_buffer_limits()  # anyio sets 0: every write would wait for a drain
        queued: Any = getattr(old, "read_queue", ())
        while queued and not proto._ended.done():
            proto.data_received(queued.popleft())
        if getattr(old, "is_at_eof", False) or getattr(old, "exception", None) is not None:
            transport.close()
        if transport.is_closing():
            # its end came (or comes) to anyio's protocol: ours only learns it here
            proto._end()
        else:
            transport.resume_reading()
        return proto

    # reading ---------------------------------------------------------------------------------
    def data_received(self, data: bytes | bytearray) -> None:
        # A protocol callback runs in no task, where sniffio cannot tell anyio its backend:
        # the dispatch may start tasks (the broker's answers) or set events, so it is told.
        if LIBRARY is None:
            self._received(data)
            return
        token = LIBRARY.set("asyncio")
        try:
            self._received(data)
        finally:
            LIBRARY.reset(token)

    def _received(self, data: bytes | bytearray) -> None:
        buf = self._buf
        if buf:
            buf += data
            data = buf
        size = len(data)
        pos = 0
        try:
            with memoryview(data) as view:
                while size - pos >= HEADER:
                    need = int.from_bytes(view[pos : pos + HEADER], "big")
                    if need > self._codec.limit:
                        raise FrameTooLarge(need, self._codec.limit)
                    end = pos + HEADER + need
                    if end > size:
                        break
                    msg = self._codec.decode(view[pos + HEADER : end])
                    pos = end
                    self._dispatch(msg)
                    if self._ended.done():
                        return
                if data is not buf and pos < size:
                    buf += view[pos:]  # a frame's start: the rest comes in later reads
        except ProtocolError:  # undecodable or oversized: this stream is of no more use
            self._abort()
            return
        if data is buf:
            del buf[:pos]

    def eof_received(self) -> bool:
        return False  # the transport closes: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self._end()

    def _abort(self) -> None:
        self._buf.clear()
        if self._transport is not None:
            self._transport.abort()  # connection_lost follows
        self._end()

    def _end(self) -> None:
        if not self._ended.done():
            self._ended.set_result(None)
        self._wake_writers()

    async def run(self) -> None:
        await asyncio.shield(self._ended)  # a cancelled waiter leaves the stream's end to come

    # writing ---------------------------------------------------------------------------------
    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = self._ended.get_loop().create_future()

    def resume_writing(self) -> None:
        self._wake_writers()

    def _wake_writers(self) -> None:
        waiter, self._writable = self._writable, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def send(self, frame: bytes | bytearray) -> None:
        transport = self._transport
        if transport is None or transport.is_closing() or self._ended.done():
            raise anyio.BrokenResourceError
        transport.write(frame)
        while self._writable is not None:  # above the high-water mark: wait for the drain
            await asyncio.shield(self._writable)
        if self._ended.done() and transport.is_closing():
            raise anyio.BrokenResourceError


class StreamChannel:
    """Any byte stream: a reader task, and sends under a lock."""

    def __init__(
        self, stream: anyio.abc.ByteStream, codec: FrameCodec[Any], dispatch: Dispatch
    ) -> None:
        self._stream = stream
        self._codec = codec
        self._dispatch = dispatch
        self._lock = anyio.Lock()

    async def run(self) -> None:
        reader = BufferedByteReceiveStream(self._stream)
        with contextlib.suppress(
            anyio.EndOfStream,
            anyio.IncompleteRead,
            anyio.ClosedResourceError,
            anyio.BrokenResourceError,
            OSError,
            ProtocolError,
        ):
            while True:
                size = self._codec.check_header(await reader.receive_exactly(HEADER))
                self._dispatch(self._codec.decode(await reader.receive_exactly(size)))

    async def send(self, frame: bytes | bytearray) -> None:
        async with self._lock:
            await self._stream.send(bytes(frame))
