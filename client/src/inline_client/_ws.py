"""A minimal websocket reader (RFC 6455) on asyncio streams, for ``/v1/runs/{id}/events``.

The client depends on httpx and msgspec only, and httpx speaks no websockets: this reads text
messages from the server until it closes, answers pings, and sends (masked) close and pong
frames. That is all the events stream needs.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import ssl
import struct
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

from ._errors import ApiError

MAX_MESSAGE = 64 * 1024 * 1024


async def messages(url: str, headers: dict[str, str], timeout: float) -> AsyncIterator[str]:
    """The text messages of the websocket at ``url`` (``http(s)://`` or ``ws(s)://``)."""
    parts = urlsplit(url)
    secure = parts.scheme in ("https", "wss")
    port = parts.port or (443 if secure else 80)
    host = parts.hostname or "127.0.0.1"
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(host, port, ssl=ssl.create_default_context() if secure else None),
        timeout,
    )
    try:
        key = base64.b64encode(os.urandom(16)).decode()
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        lines = [
            f"GET {path} HTTP/1.1", f"Host: {host}:{port}", "Upgrade: websocket",
            "Connection: Upgrade", f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13",
        ]  # fmt: skip
        lines += [f"{k}: {v}" for k, v in headers.items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
        status = head.split(b"\r\n", 1)[0].decode(errors="replace")
        if " 101 " not in status + " ":
            code = int(status.split()[1]) if len(status.split()) > 1 else 0
            raise ApiError(code, "websocket_refused", f"{url}: {status}")
        buffer: list[bytes] = []
        while True:
            fin, opcode, payload = await _frame(reader)
            if opcode == 0x8:  # close
                _send(writer, 0x8, payload[:2])
                return
            if opcode == 0x9:  # ping
                _send(writer, 0xA, payload)
                continue
            if opcode in (0x1, 0x2, 0x0):
                buffer.append(payload)
                if fin:
                    yield b"".join(buffer).decode()
                    buffer = []
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await writer.wait_closed()


async def _frame(reader: asyncio.StreamReader) -> tuple[bool, int, bytes]:
    b0, b1 = await reader.readexactly(2)
    length = b1 & 0x7F
    if length == 126:
        (length,) = struct.unpack("!H", await reader.readexactly(2))
    elif length == 127:
        (length,) = struct.unpack("!Q", await reader.readexactly(8))
    if length > MAX_MESSAGE:
        raise ApiError(0, "websocket_too_large", f"a websocket frame of {length} bytes")
    mask = await reader.readexactly(4) if b1 & 0x80 else b""
    data = await reader.readexactly(length)
    if mask:
        data = bytes(c ^ mask[i % 4] for i, c in enumerate(data))
    return bool(b0 & 0x80), b0 & 0x0F, data


def _send(writer: asyncio.StreamWriter, opcode: int, payload: bytes) -> None:
    mask = os.urandom(4)
    head = bytes([0x80 | opcode, 0x80 | len(payload)])  # control frames are < 126 bytes
    writer.write(head + mask + bytes(c ^ mask[i % 4] for i, c in enumerate(payload)))
