"""Reading PNG pixels without Pillow (the host venv has none): 8-bit RGB/RGBA, non-interlaced."""

from __future__ import annotations

import struct
import zlib


def read_png(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and the unfiltered rows of an 8-bit RGB or RGBA PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width, height, channels = 8, b"", 0, 0, 3
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and color in (2, 6), (depth, color)
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        ftype = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if ftype == 1:
                line[i] = (line[i] + a) & 0xFF
            elif ftype == 2:
                line[i] = (line[i] + b) & 0xFF
            elif ftype == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, rows


def diff_stats(a: bytes, b: bytes) -> tuple[int, int, int]:
    """The largest per-channel difference, how many channel values differ, and how many there
    are, between two PNGs of the same size."""
    wa, ha, ra = read_png(a)
    wb, hb, rb = read_png(b)
    assert (wa, ha) == (wb, hb), ((wa, ha), (wb, hb))
    most = differing = total = 0
    for r1, r2 in zip(ra, rb, strict=True):
        total += len(r1)
        for x, y in zip(r1, r2, strict=True):
            if x != y:
                differing += 1
                most = max(most, abs(x - y))
    return most, differing, total


def max_abs_diff(a: bytes, b: bytes) -> int:
    """The largest per-channel difference between two PNGs of the same size."""
    return diff_stats(a, b)[0]


#: How far two renders of one image may be apart, of 255: the suite promises the same image,
#: not the same bits (CPU math libraries do not promise bit-exact repeats: MKL's sums, for one,
#: depend on the threads it uses).
SAME = 1


def assert_same_image(a: bytes, b: bytes, what: str) -> None:
    """Two renders show the same image (equal bytes, or pixels at most ``SAME`` apart).

    Comparing the PNGs with ``==`` would make pytest diff the bytes on a failure, which once ran
    past the suite's timeout; this says how far apart they are instead.
    """
    if a == b:
        return
    most, differing, total = diff_stats(a, b)
    assert most <= SAME, (
        f"{what}: {differing} of {total} values differ, by up to {most} of 255 "
        f"(at most {SAME} allowed)"
    )


def assert_other_image(a: bytes, b: bytes, what: str, least: int = 16) -> None:
    """Two renders show clearly different images (some pixel at least ``least`` apart)."""
    most = 0 if a == b else diff_stats(a, b)[0]
    assert most >= least, f"{what}: pixels differ by only {most} of 255 (at least {least} wanted)"
