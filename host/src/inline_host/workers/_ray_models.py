"""A deployment's model on a cluster node that lacks it: fetched there from the host.

Cluster workers read models at the host's models paths on their node, or from
``INLINE_RAY_MODELS_DIR`` there where it is set. When a deployment on Ray Serve names a model,
the host lists its files (path under the models dir, size, sha256: ``model_manifest``) and lets
the host's ``ModelSource`` actor (pinned to the host's own node, reading the host's models dirs)
serve exactly those. A Serve replica starting on a node fetches what its node lacks or holds
with other bytes (``fetch_models``): in chunks through Ray's object store, into a ``.partial``
file that a later start resumes, checked by size and sha256, then renamed into place; two
replicas on one node take turns under a file lock. A file's sha256 is kept beside it
(``.<name>.sha256``: size, modification time, hash), so a model already in place is hashed
once, not at every replica's start. Only a deployment fetches (deploying is the operator's
consent); a render never does.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import secrets
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final

log = logging.getLogger("inline.ray")
#: One read from the host's source (an object in Ray's store).
CHUNK: Final = 8 << 20
#: The name (in ``NAMESPACE``) of the host's model source actor.
SOURCE: Final = "inline-model-source"
NAMESPACE: Final = "inline"
#: A model file: its path under the models dir (``vae/x.safetensors``), size and sha256.
Entry = tuple[str, int, str]
#: A fetch logs its progress at every this many bytes of a file.
PROGRESS_BYTES: Final = 1 << 30
_hashes: dict[tuple[str, int, int], str] = {}


class ModelFetchError(RuntimeError):
    """A model could not be fetched onto a node (the message says which file and why)."""


def source_name(data_dir: Path) -> str:
    """The name of the model source of the host of ``data_dir`` (one host a data dir): the same
    across the host's restarts, so a deployment's replicas keep their arguments."""
    return f"{SOURCE}-{hashlib.sha256(str(data_dir).encode()).hexdigest()[:12]}"


def _sidecar(path: Path) -> Path:
    return path.with_name(f".{path.name}.sha256")


def _lock_file(path: Path) -> Path:
    return path.with_name(f".{path.name}.lock")


def _partial(path: Path) -> Path:
    return path.with_name(f".{path.name}.partial")


def kept_beside(path: Path) -> tuple[Path, ...]:
    """The hidden files a fetch keeps beside a model file (its hash, its lock, an unfinished
    fetch): they go with it when the model is removed."""
    return _sidecar(path), _lock_file(path), _partial(path)


def _digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def sha256_of(path: Path) -> str:
    """The file's sha256, remembered by path, size and modification time (in this process, and
    beside the file for the next one, where its folder can be written)."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key in _hashes:
        return _hashes[key]
    sidecar = _sidecar(path)
    stamp = f"{st.st_size} {st.st_mtime_ns} "
    try:
        kept = sidecar.read_text()
    except (OSError, UnicodeDecodeError):
        kept = ""
    if kept.startswith(stamp) and len(kept) == len(stamp) + 64:
        _hashes[key] = kept[len(stamp) :]
        return _hashes[key]
    return _remember(path, _digest(path))


def _remember(path: Path, sha: str) -> str:
    """Keep ``sha`` as ``path``'s hash, in this process and beside the file."""
    st = path.stat()
    _hashes[(str(path), st.st_size, st.st_mtime_ns)] = sha
    sidecar = _sidecar(path)
    tmp = sidecar.with_name(f"{sidecar.name}.{secrets.token_hex(4)}")
    try:  # a read-only models dir only costs the next process a hash
        tmp.write_text(f"{st.st_size} {st.st_mtime_ns} {sha}")
        os.replace(tmp, sidecar)
    except OSError:
        tmp.unlink(missing_ok=True)
    return sha


def model_manifest(roots: Iterable[Path], model: str) -> list[Entry]:
    """The files of ``model`` (a file or folder in a category of the first models dir that has
    it), each with its size and sha256; ``[]`` when no models dir has it. Reads every byte:
    call it in a thread."""
    for root in roots:
        for category in sorted(root.iterdir()) if root.is_dir() else ():
            found = category / model
            if not found.exists():
                continue
            files = (
                [found]
                if found.is_file()
                else sorted(  # not the hashes and locks kept beside files, nor caches
                    p
                    for p in found.rglob("*")
                    if p.is_file()
                    and not any(part.startswith(".") for part in p.relative_to(found).parts)
                )
            )
            return [(p.relative_to(root).as_posix(), p.stat().st_size, sha256_of(p)) for p in files]
    return []


class ModelSource:
    """The host's models dirs, read for cluster nodes: only the files the host allowed (a
    deployment's model), never another path. A Ray actor on the host's node."""

    def __init__(self) -> None:
        self.allowed: dict[str, Path] = {}

    def allow(self, roots: list[str], entries: list[Entry]) -> None:
        """Serve these files (their paths under the first of ``roots`` that has each) from
        now on."""
        for rel, _size, _sha in entries:
            for root in map(Path, roots):
                if (root / rel).is_file():
                    self.allowed[rel] = root / rel
                    break

    def read(self, rel: str, offset: int, size: int) -> bytes:
        """``size`` bytes of ``rel`` from ``offset`` (fewer at its end)."""
        path = self.allowed.get(rel)
        if path is None:
            raise PermissionError(f"{rel} is not a file the host lets its nodes fetch")
        with path.open("rb") as f:
            f.seek(offset)
            return f.read(size)


def fetch_models(
    entries: list[Entry], models_dir: Path, read: Callable[[str, int, int], bytes]
) -> list[str]:
    """Make ``models_dir`` hold every file of ``entries``, fetching (``read(rel, offset,
    size)``) what is missing or holds other bytes; the paths fetched. Raises
    ``ModelFetchError``. Blocking: call it in a thread."""
    fetched = []
    for rel, size, sha in entries:
        dest = models_dir / rel
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ModelFetchError(
                f"{rel}: cannot write {dest.parent} on this node ({exc.strerror}); set "
                "INLINE_RAY_MODELS_DIR to a folder the nodes can write"
            ) from None
        with _locked(dest):
            if dest.is_file() and dest.stat().st_size == size and sha256_of(dest) == sha:
                continue
            _fetch_one(rel, size, sha, dest, read)
            fetched.append(rel)
    return fetched


def _fetch_one(
    rel: str, size: int, sha: str, dest: Path, read: Callable[[str, int, int], bytes]
) -> None:
    partial = _partial(dest)
    for attempt in (1, 2):  # a resumed partial of other bytes: once more from the start
        have = partial.stat().st_size if partial.exists() else 0
        if have > size:
            partial.unlink()
            have = 0
        if have:
            log.info("resuming %s at %d of %d bytes", rel, have, size)
        with partial.open("ab") as out:
            while have < size:
                block = read(rel, have, min(CHUNK, size - have))
                if not block:
                    raise ModelFetchError(f"{rel}: the host's copy ended at {have} of {size} bytes")
                out.write(block)
                if (have + len(block)) // PROGRESS_BYTES > have // PROGRESS_BYTES:
                    log.info("fetching %s: %d of %d MiB", rel, (have + len(block)) >> 20,
                             size >> 20)  # fmt: skip
                have += len(block)
            out.flush()
            os.fsync(out.fileno())
        got = _digest(partial)  # fresh bytes: never a remembered hash
        if got == sha:
            os.replace(partial, dest)
            _remember(dest, sha)  # the next replica's start hashes nothing
            return
        partial.unlink()
        if attempt == 2:
            raise ModelFetchError(f"{rel}: fetched bytes hash {got}, the host's {sha}")


class _locked:
    """An exclusive lock beside ``dest`` (two replicas on one node fetch a file once)."""

    def __init__(self, dest: Path) -> None:
        self.path = _lock_file(dest)
        self.fd = -1

    def __enter__(self) -> None:
        self.fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *_exc: Any) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
