"""The host's side of bulk bytes: reading workers' shared memory, and holding its own.

Media the host holds (a take read back from the blob store, an output that arrived in chunks)
stays inline when small and goes into the host's own shared-memory arena when large, so that a
frame never carries it. Workers' segments are mapped on first read and unmapped when the
worker is gone; the host's own segments are removed at exit.
"""

from __future__ import annotations

import os
from pathlib import Path

from inline_sdk.protocol import (
    Arena,
    ChunkedRef,
    InlineBytes,
    MediaValue,
    Region,
    SegmentReader,
    ShmRef,
)

from .._errors import InlineHostError

#: Host-held media up to this size travel inline in frames; larger ones via shared memory.
INLINE_LIMIT = 8 * 1024 * 1024


class HostBulk:
    """Reads bulk values wherever they live; holds the host's own large ones in shared memory."""

    def __init__(self, prefix: str | None = None) -> None:
        self.prefix = prefix or f"inline-{os.getpid()}-host"
        self._reader = SegmentReader()
        self._arena: Arena | None = None
        self._regions: dict[tuple[str, int], Region] = {}

    def read(self, value: MediaValue) -> bytes:
        """The bytes of a media value (copied out of shared memory)."""
        data = value.data
        if isinstance(data, InlineBytes):
            return data.data
        if isinstance(data, ChunkedRef):
            raise InlineHostError("chunked bytes were not collected before use")
        return bytes(self._reader.view(data))

    def buffer(self, value: MediaValue) -> bytes | memoryview:
        """The bytes of a media value without copying them out of shared memory."""
        data = value.data
        if isinstance(data, ShmRef):
            return self._reader.view(data)
        return self.read(value)

    def mount(self, prefix: str, folder: Path) -> None:
        """Read the segments named ``prefix...`` from ``folder`` (a sandboxed worker's
        ``/dev/shm``, a folder of its own)."""
        self._reader.mount(prefix, folder)

    def unmount(self, prefix: str) -> None:
        """Forget the folder of ``prefix``'s segments (their worker is gone)."""
        self._reader.unmount(prefix)

    def view(self, ref: ShmRef) -> memoryview:
        """A view of a shared-memory range (no copy)."""
        return self._reader.view(ref)

    def hold(self, kind: str, ext: str, data: bytes, params: dict | None = None) -> MediaValue:
        """Media the host itself holds: inline when small, else in the host's shared memory."""
        if len(data) <= INLINE_LIMIT:
            return MediaValue(kind=kind, ext=ext, data=InlineBytes(data=data), params=params)
        if self._arena is None:
            self._arena = Arena(self.prefix)
        region = self._arena.put(data)
        self._regions[region.segment, region.offset] = region
        return MediaValue(kind=kind, ext=ext, data=region.ref(), params=params)

    def owns(self, value: MediaValue) -> bool:
        """Whether ``value`` lives in the host's own arena."""
        data = value.data
        return isinstance(data, ShmRef) and (data.segment, data.offset) in self._regions

    def free(self, value: MediaValue) -> None:
        """Give a host-held value's shared memory back (its cache entry was evicted)."""
        data = value.data
        if isinstance(data, ShmRef) and self._arena is not None:
            region = self._regions.pop((data.segment, data.offset), None)
            if region is not None:
                self._arena.free(region)

    def forget(self, prefix: str) -> None:
        """Unmap every segment of a worker that is gone (its names start with ``prefix``)."""
        self._reader.forget(prefix)

    def close(self) -> None:
        """Remove the host's own segments."""
        if self._arena is not None:
            self._arena.close()
            self._arena = None
        self._regions.clear()
