"""Values across one worker's stream: bulk bytes in chunks where host and worker share no memory.

A worker that shares memory with the host gets media values as they are (shared-memory refs or
small inline bytes); one that does not gets large bytes as bounded ``BulkChunk`` frames sent
ahead of the message naming them, and sends its large outputs the same way. Chunks past the
output cap are dropped as they come: the host never holds more than the cap of one blob.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Iterable

from inline_sdk.protocol import CHUNK_SIZE, BulkChunk, ChunkedRef, InlineBytes, MediaValue, Value

from .._errors import PackCrashed
from .._values import HostValue
from ._bulk import HostBulk


class WireValues:
    """The host's side of the values of worker ``generation`` of ``pack``."""

    def __init__(
        self,
        pack: str,
        generation: int,
        bulk: HostBulk,
        max_bytes: int,
        send: Callable[[object], Awaitable[None]],
    ) -> None:
        self.pack = pack
        self.generation = generation
        self.bulk = bulk
        self.max_bytes = max_bytes
        self._send = send
        self._blob_ids = itertools.count(1)
        self._incoming: dict[int, bytearray] = {}
        self._blobs: dict[int, bytes] = {}
        self._oversize: set[int] = set()  # chunked blobs dropped for passing the output cap

    def receive(self, msg: BulkChunk) -> None:
        """Take one chunk of a blob the worker sends ahead of its reply."""
        if msg.blob in self._oversize:
            return
        buf = self._incoming.setdefault(msg.blob, bytearray())
        if len(buf) + len(msg.data) > self.max_bytes:
            self._incoming.pop(msg.blob, None)  # never hold more than the cap
            self._oversize.add(msg.blob)
            return
        buf += msg.data
        if msg.last:
            self._blobs[msg.blob] = bytes(self._incoming.pop(msg.blob))

    async def to_wire(self, hv: HostValue, *, shared: bool) -> Value:
        """A value as this worker can take it: bulk bytes in shared memory where it has it
        (``shared``), else inline (small) or in chunks sent ahead of the call."""
        value = hv.value
        if not isinstance(value, MediaValue):
            return value
        data = value.data
        if shared or (isinstance(data, InlineBytes) and len(data.data) <= CHUNK_SIZE):
            return value
        raw = data.data if isinstance(data, InlineBytes) else self.bulk.view(data)  # type: ignore[arg-type]
        blob = next(self._blob_ids)
        view = memoryview(raw).cast("B")
        for start in range(0, max(len(view), 1), CHUNK_SIZE):
            piece = bytes(view[start : start + CHUNK_SIZE])
            await self._send(BulkChunk(blob=blob, data=piece, last=start + CHUNK_SIZE >= len(view)))
        return MediaValue(
            kind=value.kind, ext=value.ext, data=ChunkedRef(blob=blob, size=len(view))
        )

    def from_wire(self, value: Value) -> HostValue:
        """An output as the host holds it (a chunked blob now in the host's own memory)."""
        if isinstance(value, MediaValue) and isinstance(value.data, ChunkedRef):
            data = self._blobs.pop(value.data.blob, None)
            if data is None or len(data) != value.data.size:
                raise PackCrashed(self.pack, None, "", "(chunked output incomplete)")
            held = self.bulk.hold(value.kind, value.ext, data, value.params)
            return HostValue(held, "host", 0)
        return HostValue(value, self.pack, self.generation)

    def drop(self, values: Iterable[Value]) -> None:
        """Forget the chunked blobs of outputs that are refused (over the cap)."""
        for v in values:
            if isinstance(v, MediaValue) and isinstance(v.data, ChunkedRef):
                self._oversize.discard(v.data.blob)
                self._blobs.pop(v.data.blob, None)

    def clear(self) -> None:
        """Forget every blob (the worker is gone)."""
        self._incoming.clear()
        self._blobs.clear()
        self._oversize.clear()
