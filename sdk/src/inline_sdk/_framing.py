"""Frames: a 4-byte big-endian length, then msgpack; with a hard size limit on both sides."""

from __future__ import annotations

import socket
from typing import Final, Generic, TypeVar

import msgspec

from ._errors import FrameTooLarge, ProtocolError

#: The largest frame either side accepts. Bulk bytes go through shared memory instead.
MAX_FRAME: Final = 16 * 1024 * 1024
HEADER: Final = 4

T = TypeVar("T")


class FrameCodec(Generic[T]):
    """Encodes any message and decodes one direction's union; built once per connection."""

    def __init__(self, decode_type: type[T] | object, limit: int = MAX_FRAME) -> None:
        self._encoder = msgspec.msgpack.Encoder()
        self._decoder: msgspec.msgpack.Decoder[T] = msgspec.msgpack.Decoder(decode_type)  # type: ignore[arg-type]
        self.limit = limit

    def encode(self, msg: object) -> bytearray:
        """One frame (header + payload) for ``msg``; raises ``FrameTooLarge`` over the limit."""
        buf = bytearray(HEADER)
        self._encoder.encode_into(msg, buf, HEADER)
        size = len(buf) - HEADER
        if size > self.limit:
            raise FrameTooLarge(size, self.limit)
        buf[:HEADER] = size.to_bytes(HEADER, "big")
        return buf

    def check_header(self, header: bytes) -> int:
        """The payload size a header announces; raises ``FrameTooLarge`` over the limit."""
        size = int.from_bytes(header, "big")
        if size > self.limit:
            raise FrameTooLarge(size, self.limit)
        return size

    def decode(self, payload: bytes | bytearray | memoryview) -> T:
        """Decode one payload; raises ``ProtocolError`` on anything outside the union."""
        try:
            return self._decoder.decode(payload)
        except msgspec.DecodeError as exc:
            raise ProtocolError(f"undecodable IPC message: {exc}") from exc


def recv_exact(sock: socket.socket, size: int) -> bytearray:
    """Read exactly ``size`` bytes; raises ``ProtocolError`` if the peer closes first."""
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        try:
            n = sock.recv_into(view[got:], size - got)
        except ConnectionError as exc:
            raise ProtocolError(f"connection lost: {exc}") from exc
        if n == 0:
            raise ProtocolError("peer closed the connection")
        got += n
    return buf


def recv_frame(sock: socket.socket, codec: FrameCodec[T]) -> T:
    """Block until one whole frame arrives and decode it."""
    size = codec.check_header(bytes(recv_exact(sock, HEADER)))
    return codec.decode(recv_exact(sock, size))


class FrameReader(Generic[T]):
    """Reads frames from a blocking socket through one buffer: each ``recv_into`` takes what
    has arrived (a small frame, or several, in one system call) and frames are decoded where
    they lie. A frame larger than the buffer grows it for as long as it is read."""

    def __init__(self, sock: socket.socket, codec: FrameCodec[T], size: int = 64 * 1024) -> None:
        self._sock = sock
        self._codec = codec
        self._size = size
        self._buf = bytearray(size)
        self._start = 0
        self._end = 0

    def read(self) -> T:
        """Block until one whole frame is in and decode it; raises ``ProtocolError`` if the
        peer closes first (or breaks the protocol)."""
        while True:
            start, avail = self._start, self._end - self._start
            want = HEADER
            if avail >= HEADER:
                size = self._codec.check_header(bytes(self._buf[start : start + HEADER]))
                want = HEADER + size
                if avail >= want:
                    with memoryview(self._buf) as view:
                        msg = self._codec.decode(view[start + HEADER : start + want])
                    self._consumed(start + want)
                    return msg
            self._room(want)
            with memoryview(self._buf) as view:
                try:
                    n = self._sock.recv_into(view[self._end :])
                except ConnectionError as exc:
                    raise ProtocolError(f"connection lost: {exc}") from exc
            if n == 0:
                raise ProtocolError("peer closed the connection")
            self._end += n

    def _consumed(self, upto: int) -> None:
        self._start = upto
        if self._start == self._end:
            self._start = self._end = 0
            if len(self._buf) > self._size:  # a large frame is read: give its room back
                self._buf = bytearray(self._size)

    def _room(self, want: int) -> None:
        """Make room after the buffered bytes for a frame of ``want`` bytes in all."""
        start, end = self._start, self._end
        if start + want <= len(self._buf) and end < len(self._buf):
            return
        kept = self._buf[start:end]
        if want > len(self._buf):
            self._buf = bytearray(want)
        self._buf[: len(kept)] = kept
        self._start, self._end = 0, len(kept)
