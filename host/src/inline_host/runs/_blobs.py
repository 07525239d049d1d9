"""A content-addressed blob store: ``blobs/sha256/ab/<hex>``, written atomically, never twice."""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path
from typing import Final

from .._errors import BlobError

BLOB_ID: Final = re.compile(r"^sha256-([0-9a-f]{64})$")
CHUNK: Final = 1 << 20


def blob_id(digest: str) -> str:
    """The contract's id for a sha256 hex digest."""
    return f"sha256-{digest}"


class BlobStore:
    """Immutable bytes by content hash."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.dir = root / "sha256"

    def path(self, bid: str) -> Path:
        """Where the blob ``bid`` lives (it may not exist); refuses malformed ids."""
        match = BLOB_ID.match(bid)
        if match is None:
            raise BlobError(f"'{bid}' is not a blob id (expected sha256-<64 lowercase hex>)")
        digest = match.group(1)
        return self.dir / digest[:2] / digest

    def has(self, bid: str) -> bool:
        """Whether the blob is stored."""
        return self.path(bid).is_file()

    def put_bytes(self, data: bytes | bytearray | memoryview) -> str:
        """Store ``data``; returns its id. Identical bytes are stored once."""
        digest = hashlib.sha256(data).hexdigest()
        bid = blob_id(digest)
        target = self.path(bid)
        if not target.exists():
            self._write(target, [data])
        return bid

    def put_file(self, source: Path) -> str:
        """Store a file's bytes (streamed); returns its id."""
        h = hashlib.sha256()
        try:
            with open(source, "rb") as fh:
                target_tmp = self._tmp_for(self.dir)
                with os.fdopen(target_tmp[0], "wb") as out:
                    while chunk := fh.read(CHUNK):
                        h.update(chunk)
                        out.write(chunk)
                    out.flush()
                    os.fsync(out.fileno())
        except OSError as exc:
            raise BlobError(f"Cannot read '{source}': {exc.strerror}") from exc
        bid = blob_id(h.hexdigest())
        target = self.path(bid)
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            os.unlink(target_tmp[1])
        else:
            os.replace(target_tmp[1], target)
        return bid

    def read(self, bid: str) -> bytes:
        """The blob's bytes; raises ``BlobError`` if it is not stored."""
        try:
            return self.path(bid).read_bytes()
        except FileNotFoundError:
            raise BlobError(f"No blob '{bid}'") from None

    def _tmp_for(self, directory: Path) -> tuple[int, str]:
        directory.mkdir(parents=True, exist_ok=True)
        return tempfile.mkstemp(dir=directory, prefix=".tmp-")

    def _write(self, target: Path, chunks: list[bytes | bytearray | memoryview]) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = self._tmp_for(target.parent)
        try:
            with os.fdopen(fd, "wb") as out:
                for chunk in chunks:
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, target)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
