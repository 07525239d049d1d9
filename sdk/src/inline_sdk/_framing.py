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
