"""Shared memory for bulk bytes: named segments allocated once and reused, never one per transfer.

An ``Arena`` owns segments under ``/dev/shm`` (``<prefix>-<n>``) and hands out regions with a
first-fit free list; a freed region is reused by the next allocation. A ``SegmentReader`` maps
other processes' segments read-only, once each, and returns zero-copy views.

Plain files under ``/dev/shm`` are used rather than ``multiprocessing.shared_memory`` because the
latter's resource tracker unlinks segments when any process that merely attached to them exits.
"""

from __future__ import annotations

import bisect
import contextlib
import mmap
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ._protocol import ShmRef

SHM_DIR: Final = (
    Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(os.environ.get("TMPDIR", "/tmp"))
)
MIN_SEGMENT: Final = 64 * 1024 * 1024
ALIGN: Final = 64


@dataclass(frozen=True, slots=True)
class Region:
    """An allocated span of a segment."""

    segment: str
    offset: int
    size: int
    capacity: int

    def ref(self) -> ShmRef:
        """The wire reference to this region."""
        return ShmRef(segment=self.segment, offset=self.offset, size=self.size)


class _Segment:
    def __init__(self, name: str, size: int) -> None:
        self.name = name
        self.size = size
        fd = os.open(SHM_DIR / name, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, size)
            self.map = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.holes: list[tuple[int, int]] = [(0, size)]  # sorted (offset, length)

    def take(self, need: int) -> int | None:
        for i, (off, length) in enumerate(self.holes):
            if length >= need:
                if length == need:
                    del self.holes[i]
                else:
                    self.holes[i] = (off + need, length - need)
                return off
        return None

    def give(self, off: int, length: int) -> None:
        i = bisect.bisect_left(self.holes, (off, 0))
        self.holes.insert(i, (off, length))
        # merge with the next hole, then with the previous one
        if i + 1 < len(self.holes) and off + length == self.holes[i + 1][0]:
            self.holes[i] = (off, length + self.holes[i + 1][1])
            del self.holes[i + 1]
        if i > 0 and self.holes[i - 1][0] + self.holes[i - 1][1] == off:
            prev_off, prev_len = self.holes[i - 1]
            self.holes[i - 1] = (prev_off, prev_len + self.holes[i][1])
            del self.holes[i]


class Arena:
    """Segments this process owns; thread-safe allocation of regions in them."""

    def __init__(self, prefix: str, min_segment: int = MIN_SEGMENT) -> None:
        self.prefix = prefix
        self.min_segment = min_segment
        self._segments: dict[str, _Segment] = {}
        self._lock = threading.Lock()

    def alloc(self, size: int) -> Region:
        """A region of at least ``size`` bytes, reusing freed space before growing."""
        need = max(ALIGN, (size + ALIGN - 1) // ALIGN * ALIGN)
        with self._lock:
            for seg in self._segments.values():
                off = seg.take(need)
                if off is not None:
                    return Region(seg.name, off, size, need)
            seg = _Segment(f"{self.prefix}-{len(self._segments)}", max(self.min_segment, need))
            self._segments[seg.name] = seg
            off = seg.take(need)
            assert off is not None
            return Region(seg.name, off, size, need)

    def put(self, data: bytes | bytearray | memoryview) -> Region:
        """Copy ``data`` into a new region (one memcpy)."""
        view = memoryview(data).cast("B")
        region = self.alloc(view.nbytes)
        self.view(region)[:] = view
        return region

    def view(self, region: Region) -> memoryview:
        """A writable view of a region."""
        seg = self._segments[region.segment]
        return memoryview(seg.map)[region.offset : region.offset + region.size]

    def free(self, region: Region) -> None:
        """Give a region back for reuse."""
        with self._lock:
            seg = self._segments.get(region.segment)
            if seg is not None:
                seg.give(region.offset, region.capacity)

    def free_bytes(self) -> int:
        """Bytes available without growing (for tests and diagnostics)."""
        with self._lock:
            return sum(length for s in self._segments.values() for _, length in s.holes)

    def close(self) -> None:
        """Unmap and unlink every segment."""
        with self._lock:
            for seg in self._segments.values():
                # a view may still be exported; the unlink below frees the memory regardless
                with contextlib.suppress(BufferError):
                    seg.map.close()
                unlink_segment(seg.name)
            self._segments.clear()


class SegmentReader:
    """Maps other processes' segments read-only, once each, for zero-copy reads.

    A process whose ``/dev/shm`` is a folder of its own (a sandboxed worker's) is ``mount``-ed:
    the segments named with its prefix are read from that folder.
    """

    def __init__(self) -> None:
        self._maps: dict[str, mmap.mmap] = {}
        self._folders: dict[str, Path] = {}
        self._lock = threading.Lock()

    def mount(self, prefix: str, folder: Path) -> None:
        """Read the segments whose names start with ``prefix`` from ``folder``."""
        with self._lock:
            self._folders[prefix] = folder

    def unmount(self, prefix: str) -> None:
        """Forget where ``prefix``'s segments lie (their owner is gone)."""
        with self._lock:
            self._folders.pop(prefix, None)

    def _path(self, segment: str) -> Path:
        for prefix, folder in self._folders.items():
            if segment.startswith(prefix):
                return folder / segment
        return SHM_DIR / segment

    def view(self, ref: ShmRef) -> memoryview:
        """A read-only view of the bytes ``ref`` names."""
        with self._lock:
            m = self._maps.get(ref.segment)
            if m is None or len(m) < ref.offset + ref.size:
                if "/" in ref.segment or ref.segment.startswith("."):
                    raise ValueError(f"bad shared-memory segment name {ref.segment!r}")
                fd = os.open(self._path(ref.segment), os.O_RDONLY)
                try:
                    m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
                finally:
                    os.close(fd)
                self._maps[ref.segment] = m
        return memoryview(m)[ref.offset : ref.offset + ref.size]

    def forget(self, prefix: str) -> None:
        """Drop mappings of segments whose names start with ``prefix`` (their owner is gone)."""
        with self._lock:
            for name in [n for n in self._maps if n.startswith(prefix)]:
                m = self._maps.pop(name)
                with contextlib.suppress(BufferError):
                    m.close()


def unlink_segment(name: str) -> None:
    """Remove a segment's name (memory is freed once the last mapping goes)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(SHM_DIR / name)


def unlink_segments(prefix: str) -> int:
    """Remove every segment whose name starts with ``prefix``; the count removed."""
    count = 0
    for path in SHM_DIR.glob(f"{prefix}*"):
        unlink_segment(path.name)
        count += 1
    return count
