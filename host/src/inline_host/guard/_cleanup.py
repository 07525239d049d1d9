"""What a host that died without cleaning up left behind, removed when the next one starts."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
from pathlib import Path

from inline_sdk._shm import SHM_DIR

log = logging.getLogger("inline.guard")
#: Segments are named ``inline-<host pid>-<owner>-...`` (the host's own and its workers'), and
#: so are the folders that sandboxed workers see as their ``/dev/shm``.
SEGMENT = re.compile(r"^inline-(\d+)-")


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_dead_hosts_segments(shm_dir: Path = SHM_DIR) -> int:
    """Unlink shared-memory segments whose host process is gone; the count removed."""
    removed = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir(shm_dir):
            m = SEGMENT.match(entry.name)
            if m is None or int(m.group(1)) == os.getpid() or alive(int(m.group(1))):
                continue
            with contextlib.suppress(FileNotFoundError, PermissionError):
                if entry.is_dir(follow_symlinks=False):  # a sandboxed worker's own /dev/shm
                    shutil.rmtree(entry.path)
                else:
                    os.unlink(entry.path)
                removed += 1
    if removed:
        log.info("removed %d shared-memory segment(s) of hosts that are gone", removed)
    return removed


def remove_orphan_temps(blobs_dir: Path, takes_dir: Path) -> int:
    """Remove half-written temp files (``.tmp-*`` blobs, ``.*.tmp`` take links) that a crash
    left; the count removed. Only called before this host writes anything."""
    removed = 0
    candidates = [*blobs_dir.rglob(".tmp-*")] if blobs_dir.is_dir() else []
    if takes_dir.is_dir():
        candidates += [p for p in takes_dir.glob(".*.tmp")]
    for path in candidates:
        with contextlib.suppress(OSError):
            if path.is_file() and not path.is_symlink():
                path.unlink()
                removed += 1
    if removed:
        log.info("removed %d orphan temp file(s) from the blob store", removed)
    return removed
