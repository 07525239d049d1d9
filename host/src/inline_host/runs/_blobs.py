"""A content-addressed blob store: ``blobs/sha256/ab/<hex>``, written atomically, never twice.

Every blob is written to a fresh temp file and renamed into place, so no reader ever sees a
partial one. A blob of ``SMALL`` bytes or more is fsynced before the rename; a smaller one is
not (most takes are a few bytes of text, and the fsync was most of their cost): it is as
durable as the SQLite row that names it (WAL, ``synchronous=NORMAL``, no fsync at commit). A
power loss can therefore leave a small blob short or empty, which is why every read of one
checks its bytes against the hash in its name, once per process, and treats a mismatch as a
blob that is not there (the node runs again; writing its bytes again mends the blob).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import stat
from pathlib import Path
from typing import Final

from .._errors import BlobError

BLOB_ID: Final = re.compile(r"^sha256-([0-9a-f]{64})$")
CHUNK: Final = 1 << 20
#: Blobs under this size are written without an fsync, and checked against their hash on read.
SMALL: Final = 64 << 10
#: How many digests the store remembers as sound (written or checked by this process).
SOUND_CAP: Final = 1 << 16
_CREATE: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)


def blob_id(digest: str) -> str:
    """The contract's id for a sha256 hex digest."""
    return f"sha256-{digest}"


class BlobStore:
    """Immutable bytes by content hash."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.dir = root / "sha256"
        self._dir = str(self.dir)
        #: Prefix folders known to exist (256 at most).
        self._made: set[str] = set()
        #: Digests whose bytes on disk are known whole: written or checked by this process.
        self._sound: set[str] = set()

    def make_folders(self) -> None:
        """Make the 256 prefix folders now (once, when the store is opened), so that a new
        store's first blobs do not each make one (a new inode costs more than a new file)."""
        os.makedirs(self._dir, exist_ok=True)
        have = set(os.listdir(self._dir))
        for i in range(256):
            name = f"{i:02x}"
            if name not in have:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(f"{self._dir}/{name}")
            self._made.add(f"{self._dir}/{name}")

    def path(self, bid: str) -> Path:
        """Where the blob ``bid`` lives (it may not exist); refuses malformed ids."""
        digest = self._digest(bid)
        return self.dir / digest[:2] / digest

    def has(self, bid: str) -> bool:
        """Whether the blob is stored (whole)."""
        return self.sound_path(bid) is not None

    def sound_path(self, bid: str) -> Path | None:
        """The blob's file if it is stored whole, else None (a small blob's bytes are checked
        against its hash the first time this process looks at it)."""
        digest = self._digest(bid)
        target = self._target(digest)
        return Path(target) if self._stored_whole(digest, target) else None

    def put_bytes(self, data: bytes | bytearray | memoryview) -> str:
        """Store ``data``; returns its id. Identical bytes are stored once."""
        return blob_id(self._put(data)[0])

    def put_linked(self, data: bytes | bytearray | memoryview, link: str) -> str:
        """Store ``data`` and give it a second name ``link``, a path nothing has yet (a hard
        link to the blob, or a copy renamed into place where links are refused); returns the
        blob's id."""
        digest, target = self._put(data)
        try:
            os.link(target, link)
        except FileExistsError:
            raise
        except FileNotFoundError:  # the link's folder is missing (or went away)
            os.makedirs(os.path.dirname(link), exist_ok=True)
            os.link(target, link)
        except OSError:  # no hard links here
            head, name = os.path.split(link)
            tmp = f"{head}/.{name}.tmp"  # what a crash leaves here is cleaned up at start
            self._write_new(tmp, data, sync=memoryview(data).nbytes >= SMALL)
            os.replace(tmp, link)
        return blob_id(digest)

    def put_file(self, source: Path) -> str:
        """Store a file's bytes (streamed); returns its id."""
        h = hashlib.sha256()
        tmp = self._tmp_name(self._dir)
        try:
            with open(source, "rb") as fh:
                fd = self._create(tmp, self._dir)
                with os.fdopen(fd, "wb") as out:
                    while chunk := fh.read(CHUNK):
                        h.update(chunk)
                        out.write(chunk)
                    out.flush()
                    os.fsync(out.fileno())
        except OSError as exc:
            _discard(tmp)
            raise BlobError(f"Cannot read '{source}': {exc.strerror}") from exc
        digest = h.hexdigest()
        target = self._target(digest)
        if self._stored_whole(digest, target):
            os.unlink(tmp)
        else:
            self._folder(os.path.dirname(target))
            os.replace(tmp, target)
            self._remember(digest)
        return blob_id(digest)

    def read(self, bid: str) -> bytes:
        """The blob's bytes; raises ``BlobError`` if it is not stored (or not whole)."""
        digest = self._digest(bid)
        try:
            data = (self.dir / digest[:2] / digest).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise BlobError(f"No blob '{bid}'") from None
        if len(data) >= SMALL or digest in self._sound or self._check(digest, data):
            return data
        raise BlobError(f"No blob '{bid}' (its bytes on disk do not match its hash)")

    # writing ----------------------------------------------------------------------------------
    def _put(self, data: bytes | bytearray | memoryview) -> tuple[str, str]:
        """Store ``data``: (its digest, its path)."""
        digest = hashlib.sha256(data).hexdigest()
        target = self._target(digest)
        # one present and whole is kept (checking a small one is cheaper than a new file); a
        # short one, which a power loss can leave of a small blob, is written again
        if not self._stored_whole(digest, target):
            tmp = self._tmp_name(os.path.dirname(target))
            self._write_new(tmp, data, sync=memoryview(data).nbytes >= SMALL)
            try:
                os.replace(tmp, target)
            except BaseException:
                _discard(tmp)
                raise
            self._remember(digest)
        return digest, target

    def _stored_whole(self, digest: str, target: str) -> bool:
        """Whether ``target`` holds the blob whole: a large one was fsynced before it was
        named; a small one is checked against ``digest`` once per process."""
        try:
            st = os.stat(target)
        except OSError:
            return False
        if not stat.S_ISREG(st.st_mode):
            return False
        if st.st_size >= SMALL or digest in self._sound:
            return True
        try:
            with open(target, "rb") as fh:
                data = fh.read()
        except OSError:
            return False
        return self._check(digest, data)

    def _target(self, digest: str) -> str:
        return f"{self._dir}/{digest[:2]}/{digest}"

    def _tmp_name(self, directory: str) -> str:
        return f"{directory}/.tmp-{secrets.token_hex(8)}"

    def _folder(self, directory: str) -> None:
        """Make ``directory`` (once per process: the set remembers it)."""
        if directory not in self._made:
            os.makedirs(directory, exist_ok=True)
            self._made.add(directory)

    def _create(self, path: str, directory: str) -> int:
        """A new file at ``path``, its folder made the first time."""
        self._folder(directory)
        try:
            return os.open(path, _CREATE, 0o600)
        except FileNotFoundError:  # the folder went away since
            os.makedirs(directory, exist_ok=True)
            return os.open(path, _CREATE, 0o600)

    def _write_new(self, path: str, data: bytes | bytearray | memoryview, *, sync: bool) -> None:
        """Write ``data`` to the new file ``path`` (removed again if the write fails)."""
        fd = self._create(path, os.path.dirname(path))
        try:
            try:
                view = memoryview(data).cast("B")
                start, size = 0, len(view)
                while start < size:  # streamed, never copied
                    start += os.write(fd, view[start : start + CHUNK * 16])
                if sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        except BaseException:
            _discard(path)
            raise

    # checking ---------------------------------------------------------------------------------
    def _digest(self, bid: str) -> str:
        match = BLOB_ID.match(bid)
        if match is None:
            raise BlobError(f"'{bid}' is not a blob id (expected sha256-<64 lowercase hex>)")
        return match.group(1)

    def _check(self, digest: str, data: bytes) -> bool:
        if hashlib.sha256(data).hexdigest() != digest:
            return False
        self._remember(digest)
        return True

    def _remember(self, digest: str) -> None:
        if len(self._sound) >= SOUND_CAP:
            self._sound.clear()  # forgetting costs one more check of each, nothing else
        self._sound.add(digest)


def _discard(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
