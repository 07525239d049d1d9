"""Turning a node's media outputs into immutable takes: bytes in the blob store, a row each."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import struct
import zlib
from pathlib import Path
from typing import Any, Final

from inline_sdk.protocol import MediaValue

from ._blobs import BlobStore
from ._store import TakeRecord, now_ms

TAKE_KINDS: Final = frozenset({"image", "video", "audio", "mesh"})  # mesh: a .glb
PNG_MAGIC: Final = b"\x89PNG\r\n\x1a\n"


def new_take_id() -> str:
    """``take_`` + 12 lowercase hex."""
    return "take_" + secrets.token_hex(6)


def png_with_text(data: bytes, key: str, text: str) -> bytes:
    """``data`` with an iTXt chunk ``key`` = ``text`` after the header (PNG only)."""
    if not data.startswith(PNG_MAGIC) or len(data) < 33:
        return data
    body = key.encode("latin-1") + b"\x00\x00\x00\x00\x00" + text.encode()
    chunk = struct.pack(">I", len(body)) + b"iTXt" + body
    chunk += struct.pack(">I", zlib.crc32(b"iTXt" + body) & 0xFFFFFFFF)
    ihdr_end = 8 + 4 + 4 + 13 + 4  # signature, length, type, IHDR data, CRC
    return data[:ihdr_end] + chunk + data[ihdr_end:]


class TakeWriter:
    """Writes takes' bytes (content-addressed, atomically) and their stable file names."""

    def __init__(self, blobs: BlobStore, takes_dir: Path, cwd: Path) -> None:
        self.blobs = blobs
        self.takes_dir = takes_dir
        self.cwd = cwd

    def write(
        self,
        *,
        run_id: str,
        node_id: str,
        node_type: str,
        cache_key: str,
        port: str,
        value: MediaValue,
        data: bytes,
        params: dict[str, Any],
        graph: dict[str, Any] | None,
    ) -> TakeRecord:
        """Store one media output as a take."""
        if value.ext == "png":
            recipe = {"node": node_id, "type": node_type, "params": params, "graph": graph}
            data = png_with_text(data, "inline", json.dumps(recipe, separators=(",", ":")))
        bid = self.blobs.put_bytes(data)
        take_id = new_take_id()
        path = self.takes_dir / f"{take_id}.{value.ext}"
        self._link(self.blobs.path(bid), path)
        try:
            uri = str(path.relative_to(self.cwd))
        except ValueError:
            uri = str(path)
        return TakeRecord(
            id=take_id,
            run_id=run_id,
            node_id=node_id,
            port=port,
            kind=value.kind,
            ext=value.ext,
            uri=uri,
            hash=bid,
            params=params,
            cache_key=cache_key,
            created_at=now_ms(),
        )

    def _link(self, blob: Path, path: Path) -> None:
        """A named, extension-bearing file for the take: a hard link to the blob (or a copy)."""
        self.takes_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        try:
            os.link(blob, tmp)
        except OSError:
            tmp.write_bytes(blob.read_bytes())
        os.replace(tmp, path)
