"""A resumable, verified transfer of one file over HTTP into a staged file.

The stage is ``<staging>/<path>.<etag>.incomplete``: a name every process computes alike, so a
new process finds the bytes a killed one left and asks only for the rest (``Range:
bytes=<staged>-``). ``<path>.lock`` is held (``flock``) while the stage is written and moved, so
two downloads of one file never write into one stage: the second is refused.

How the server's answer is taken:

- 206 with the ``Content-Range`` asked for: appended to the stage;
- 200 to a ranged request (the Range ignored): the stage is emptied and filled from zero;
- 206 with another range, or 416: the staged bytes are dropped and the whole file asked for.

At the end the stage is checked against the declared size (the tree's LFS pointer, the HEAD's,
else the GET's own ``Content-Length`` or ``Content-Range`` total) and, where the Hub gives one,
its hash (the LFS sha256 of the tree or the ETag, or the git blob sha1 a small file's ETag is);
a stage that does not match is deleted, and the caller says so. A file whose server declares
neither a size nor a hash cannot be verified: the caller refuses it. Every read waits at most
``timeout`` seconds for a byte.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import hashlib
import re
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

#: Attempts in a row that bring no new byte before a transfer gives up.
RETRIES: Final = 5
_HASH_CHUNK: Final = 8 << 20
_CONTENT_RANGE: Final = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
_UNSATISFIED: Final = re.compile(r"bytes \*/(\d+)")
_HEX: Final = re.compile(r"[0-9a-f]+")


class TransferError(Exception):
    """A transfer that cannot go on: its stage is held by another download, the server keeps
    answering what cannot be used, or the stage cannot be written."""


@dataclass(frozen=True, slots=True)
class Digest:
    """A hash the finished file must have: ``kind`` is ``sha256`` or ``git-sha1`` (a git blob
    id: sha1 of ``blob <size>\\0`` and the bytes)."""

    kind: str
    hexdigest: str


def expected_digest(etag: str | None, sha256: str | None) -> Digest | None:
    """The hash to check: the tree's LFS sha256, else what the Hub's ETag is (the sha256 of an
    LFS file, the git blob sha1 of a small one), else none (then the size alone is checked)."""
    if sha256:
        return Digest("sha256", sha256.lower())
    tag = (etag or "").lower().removeprefix("w/").strip('"')
    if _HEX.fullmatch(tag) and len(tag) in (40, 64):
        return Digest("sha256" if len(tag) == 64 else "git-sha1", tag)
    return None


def digest_of(path: Path, kind: str) -> str:
    """The ``kind`` hash (see ``Digest``) of the file at ``path``."""
    h = hashlib.sha256() if kind == "sha256" else hashlib.sha1(b"blob %d\0" % path.stat().st_size)
    with path.open("rb") as fh:
        while chunk := fh.read(_HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def check(part: Path, size: int | None, digest: Digest | None) -> str | None:
    """What is wrong with the finished stage (size, then hash), or None."""
    got = part.stat().st_size
    if size is not None and got != size:
        return f"downloaded {got} bytes, expected {size}"
    if digest is not None:
        actual = digest_of(part, digest.kind)
        if actual != digest.hexdigest:
            return (
                f"the bytes do not match the Hub's {digest.kind} ({actual[:12]}... instead of "
                f"{digest.hexdigest[:12]}...): the staged file was corrupted"
            )
    return None


def stage_file(staging: Path, path: str, etag: str | None) -> Path:
    """Where ``path``'s bytes are staged: named after the file and its version (the ETag), the
    same in every process."""
    tag = re.sub(r"[^0-9A-Za-z]", "", etag or "")[:64] or "unversioned"
    return staging / f"{path}.{tag}.incomplete"


def _versions(staging: Path, path: str) -> list[Path]:
    target = staging / path
    return sorted(target.parent.glob(f"{glob.escape(target.name)}.*.incomplete"))


def staged_bytes(staging: Path, path: str) -> int:
    """The bytes staged for ``path``: the progress of the transfer under way (the stage
    written last; a stage of another version, left by an interrupted try, is not counted)."""
    newest: tuple[float, int] = (0.0, 0)
    for p in _versions(staging, path):
        with contextlib.suppress(OSError):
            st = p.stat()
            newest = max(newest, (st.st_mtime, st.st_size))
    return newest[1]


def disk_problem(exc: OSError, path: Path) -> str:
    """One line for a local write that failed: a full disk names the folder it fills."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return (
            f"the disk is full: no space left to write in {path.parent} ({exc.strerror}); free "
            "some space, then run this again (it resumes)"
        )
    return f"cannot write {path}: {exc.strerror or exc}"


def drop_other_versions(staging: Path, path: str, keep: Path) -> int:
    """Delete what is staged for another version of ``path``; the bytes dropped."""
    dropped = 0
    for p in _versions(staging, path):
        if p != keep:
            with contextlib.suppress(OSError):
                dropped += p.stat().st_size
                p.unlink()
    return dropped


@contextlib.contextmanager
def claim(staging: Path, path: str, what: str) -> Iterator[None]:
    """Hold ``path``'s stage lock for the block; ``TransferError`` when another download holds
    it (the kernel lets go of a killed process's lock)."""
    lock = staging / f"{path}.lock"
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        fh = lock.open("a")
    except OSError as exc:
        raise TransferError(disk_problem(exc, lock)) from None
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise TransferError(
                f"{what} is being downloaded by another process (it holds {lock}): wait for "
                "it to finish, or stop it, then run this again"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def release_staging(staging: Path) -> bool:
    """Remove a repo's staging folder unless a download still holds a lock in it; whether it
    was removed."""
    for lock in staging.rglob("*.lock") if staging.is_dir() else ():
        with lock.open("a") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            fcntl.flock(fh, fcntl.LOCK_UN)
    shutil.rmtree(staging, ignore_errors=True)
    return True


def _transient(exc: BaseException) -> bool:
    """A dropped connection or a timeout (httpx's or httpx2's ``TransportError``)."""
    root = type(exc).__module__.split(".")[0]
    kinds = {c.__name__ for c in type(exc).__mro__}
    return root in ("httpx", "httpx2", "httpcore") and "TransportError" in kinds


def _mb(n: int | None) -> str:
    return "?" if n is None else f"{n / 1e6:.1f} MB"


def _answer(
    r: Any, have: int, size: int | None, what: str, say: Callable[[str], None]
) -> tuple[str, int | None]:
    """How to take the response to a GET from byte ``have``: ``append`` (it continues the
    stage), ``restart`` (the whole file, from zero), ``drop`` (unusable: drop the stage and ask
    again) or ``done`` (nothing is left to send); with the file's size as the answer declares
    it (None when it declares none)."""
    from huggingface_hub.utils import hf_raise_for_status

    content_range = r.headers.get("Content-Range", "").strip()
    if r.status_code == 416:
        whole = _UNSATISFIED.fullmatch(content_range)
        if whole is not None and int(whole[1]) == have and size in (None, have):
            return "done", have
        say(f"{what}: the server cannot send from byte {have} (416): starting again from zero")
        return "drop", None
    hf_raise_for_status(r)
    if r.status_code == 200:
        length = r.headers.get("Content-Length", "").strip()
        total = int(length) if length.isdigit() else None
        if size is not None and total is not None and total != size:
            raise TransferError(f"{what}: the server sends {length} bytes, the file has {size}")
        if have:
            say(f"{what}: the server ignored the range and sends the whole file: from zero")
        return "restart", total
    if r.status_code != 206:
        raise TransferError(f"{what}: the server answered HTTP {r.status_code}, not the file")
    m = _CONTENT_RANGE.fullmatch(content_range)
    if m is not None and int(m[1]) == have and (size is None or m[3] in ("*", str(size))):
        return "append", int(m[3]) if m[3].isdigit() else None
    say(f"{what}: asked for bytes {have}-, the server sent "
        f"{content_range or 'no Content-Range'}: starting again from zero")  # fmt: skip
    return "drop", None


#: The least a transfer must bring in each window of ``timeout`` seconds: a server that drips
#: a byte at a time never trips a read timeout, so it is stopped by this floor instead.
MIN_BYTES_PER_WINDOW: Final = 64 << 10


def _write(
    r: Any, part: Path, mode: str, progress: Callable[[int], object], window: float, what: str
) -> None:
    try:
        with part.open(mode) as out:
            done = out.tell()
            mark, mark_done = time.monotonic(), done
            for chunk in r.iter_bytes():
                out.write(chunk)
                out.flush()  # what arrived is on disk: a killed process resumes after it
                done += len(chunk)
                progress(done)
                now = time.monotonic()
                if now - mark >= window:
                    if done - mark_done < MIN_BYTES_PER_WINDOW:
                        raise TransferError(
                            f"{what}: the server sent {done - mark_done} bytes in "
                            f"{now - mark:.0f} s (under {MIN_BYTES_PER_WINDOW >> 10} KiB per "
                            f"INLINE_HUB_TIMEOUT={window:g} s); what arrived is kept: run it "
                            "again to resume"
                        )
                    mark, mark_done = now, done
    except OSError as exc:  # the disk: full, read-only... (network errors are httpx's)
        raise TransferError(disk_problem(exc, part)) from None


def transfer(
    url: str,
    part: Path,
    *,
    size: int | None,
    headers: dict[str, str],
    what: str,
    say: Callable[[str], None],
    timeout: float,
    progress: Callable[[int], object] = lambda _: None,
) -> int | None:
    """Fill ``part`` with the file at ``url`` (``size`` bytes if known), from the bytes it
    already holds; the size declared (``size``, else the server's), None when nothing declared
    one. Dropped connections are resumed in place; ``RETRIES`` attempts in a row without a new
    byte give up (the network error, or ``TransferError``); ``timeout`` seconds without a byte
    is such an attempt."""
    from huggingface_hub.utils import get_session

    session = get_session()
    try:
        part.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TransferError(disk_problem(exc, part)) from None
    failures, best = 0, 0  # attempts in a row without a new byte; the most bytes staged yet
    while True:
        have = _size(part)
        if size is not None and have > size:
            say(f"{what}: {have} bytes staged, more than the file's {size}: from zero")
            part.unlink()
            have, failures = 0, failures + 1
        elif have > best:
            failures, best = 0, have
        if size is not None and have == size and part.is_file():
            return size
        if failures >= RETRIES:
            raise TransferError(f"{what}: no progress after {RETRIES} attempts; run it again")
        ask = {**headers, "Accept-Encoding": "identity"}
        if have:
            ask["Range"] = f"bytes={have}-"
            say(f"{what}: resuming from {_mb(have)} of {_mb(size)}")
        try:
            with session.stream("GET", url, headers=ask, follow_redirects=True,
                                timeout=timeout) as r:  # fmt: skip
                how, total = _answer(r, have, size, what, say)
                size = size if total is None else total  # a known size is never contradicted
                if how == "done":
                    return size
                if how == "drop":
                    part.unlink(missing_ok=True)
                    failures += 1
                    continue
                _write(r, part, "ab" if how == "append" else "wb", progress, timeout, what)
        except Exception as exc:
            if not _transient(exc):
                raise
            failures += 1
            now = _size(part)
            if failures >= RETRIES and now <= best:
                raise  # the network's own error: the caller names the Hub it could not reach
            say(f"{what}: {type(exc).__name__} after {_mb(now)}: resuming")
            time.sleep(min(failures, 5))  # a brief back-off before asking the server again
            continue
        if size is None:
            return None  # a body that declared no length ended: only a hash can verify it
        failures += _size(part) <= have  # an answer that brought no byte counts as a failure


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
