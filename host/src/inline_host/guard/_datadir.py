"""One host per data dir: ``<data dir>/host.lock``, an OS lock the kernel drops with its holder.

Two hosts on one data dir would both resume the same interrupted runs. The server takes an
exclusive ``flock`` on the lock file before it resumes or serves anything and keeps it for its
life; a second server is refused with one line naming the holder's pid and port, which the
holder writes into the file. The lock belongs to the open file description, not the path: a
``kill -9``'d host leaves nothing stale behind, and the descriptor is close-on-exec, so no
worker or download child it starts inherits it. The file itself is never removed (removing it
while another host waits would let two hosts lock two different files).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from .._errors import InlineHostError
from ._cleanup import alive

LOCK_NAME = "host.lock"
#: Every record is exactly this long (JSON padded with spaces), written with one ``pwrite``, so
#: a reader sees the whole of one record, never half of two.
RECORD_SIZE = 128
#: A refused host rereads a record this many times (it may catch the holder between taking
#: the lock and writing it), 50 ms apart.
_READ_TRIES = 20


@dataclass(frozen=True, slots=True)
class Holder:
    """The host holding a data dir, as its lock file names it (None where unknown)."""

    pid: int | None = None
    port: int | None = None

    def describe(self) -> str:
        """'pid 123, port 8848' (or what of it is known)."""
        pid = "pid unknown" if self.pid is None else f"pid {self.pid}"
        port = "port unknown" if self.port is None else f"port {self.port}"
        return f"{pid}, {port}"


class DataDirBusy(InlineHostError):
    """Another live host holds the data dir's lock."""

    def __init__(self, data_dir: Path, holder: Holder) -> None:
        self.data_dir = data_dir
        self.holder = holder
        super().__init__(
            f"the data dir {data_dir} is in use by another Inline host ({holder.describe()}): "
            "stop that one first, or pick another data dir with --data-dir (INLINE_DATA_DIR)"
        )


class DataDirLock:
    """The held lock on a data dir; released by ``release()`` or by the process ending."""

    def __init__(self, fd: int, path: Path) -> None:
        self._fd: int | None = fd
        self.path = path

    def record(self, port: int) -> None:
        """Write this process's pid and ``port`` into the lock file (read by refused hosts)."""
        if self._fd is None:
            raise RuntimeError(f"{self.path} is no longer held")
        payload = json.dumps({"pid": os.getpid(), "port": port}).encode()
        os.pwrite(self._fd, payload.ljust(RECORD_SIZE - 1) + b"\n", 0)
        os.ftruncate(self._fd, RECORD_SIZE)  # a longer file of some older format: cut it

    def release(self) -> None:
        """Drop the lock (closing the descriptor releases it)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def __enter__(self) -> DataDirLock:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def read_holder(fd: int) -> Holder:
    """The holder a lock file names (unknown fields where it holds no valid record)."""
    try:
        raw = json.loads(os.pread(fd, RECORD_SIZE, 0) or b"{}")
    except (OSError, ValueError):
        return Holder()
    if not isinstance(raw, dict):
        return Holder()
    pid, port = raw.get("pid"), raw.get("port")
    return Holder(
        pid if isinstance(pid, int) and pid > 0 else None,
        port if isinstance(port, int) and port >= 0 else None,
    )


def lock_data_dir(data_dir: Path, port: int) -> DataDirLock:
    """Take ``data_dir``'s lock for this process and record ``port`` in it.

    Raises ``DataDirBusy`` (naming the holder) when another live host holds it, and
    ``OSError`` when the lock cannot be taken at all (a file system without locks).
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        holder = Holder()
        for attempt in range(_READ_TRIES):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = read_holder(fd)
                if holder.pid is not None and (holder.pid == os.getpid() or alive(holder.pid)):
                    break
                # the holder took the lock but has not written its record yet (or the record
                # is a dead host's): look again, briefly
                if attempt + 1 < _READ_TRIES:
                    time.sleep(0.05)
                continue
            lock = DataDirLock(fd, path)
            lock.record(port)
            return lock
        raise DataDirBusy(data_dir, holder)
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(fd)
        raise


def held_elsewhere(data_dir: Path) -> bool:
    """Whether another live process holds ``data_dir``'s lock now (a host serving it), so its
    half-written files are work in progress, not a crash's leftovers."""
    path = data_dir / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return read_holder(fd).pid != os.getpid()  # this process's own serve() holds it
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)
