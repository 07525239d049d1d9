"""Where a worker runs: the ``WorkerLauncher`` seam.

The supervisor asks a launcher for a worker of a pack and gets back a byte stream speaking the
IPC protocol, plus a handle to stop the worker and read its log. Nothing outside the launcher
knows where the worker runs: the local and TCP launchers are in ``_launchers.py``, Ray's in
``_ray.py``, and ``_choice.py`` is the one place that picks one.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import anyio
import anyio.abc


class LaunchFailed(Exception):
    """A launcher could not produce a connected worker (the message says why)."""


class LaunchedWorker(Protocol):
    """A started worker, as the supervisor sees it."""

    stream: anyio.abc.ByteStream
    pid: int | None
    #: Whether host and worker share memory (``/dev/shm`` segments are visible to both).
    shares_memory: bool

    def stderr(self) -> AsyncIterator[bytes] | None:
        """The worker's log stream, if the launcher can read it."""
        ...

    async def wait(self) -> int | None:
        """Wait for the worker to end; its exit status (negative: killed by that signal)."""
        ...

    def kill(self) -> None:
        """Stop the worker now (and everything it started)."""
        ...

    def describe(self) -> dict[str, Any]:
        """Where the worker runs, for ``/v1/health``."""
        ...


@runtime_checkable
class ExitProbe(Protocol):
    """A launched worker that can tell, without waiting, that its process has exited."""

    def has_exited(self) -> bool:
        """Whether the worker's process has exited (reaped or not)."""
        ...


def ended(worker: LaunchedWorker) -> bool:
    """Whether ``worker`` is known to be gone right now, before the host's reader has seen it:
    its process exited (a child of this host), or its connection reached its end."""
    if isinstance(worker, ExitProbe) and worker.has_exited():
        return True
    sock = worker.stream.extra(anyio.abc.SocketAttribute.raw_socket, None)
    if sock is None:
        return False
    if sock.fileno() < 0:
        return True
    try:
        # the event loop's socket refuses recv(): peek through a duplicate of its fd, which
        # takes nothing from the reader; b"" is the end of the stream
        with socket.fromfd(sock.fileno(), sock.family, sock.type) as probe:
            return probe.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except (BlockingIOError, InterruptedError):
        return False  # open, and nothing to read
    except OSError:
        return True


class WorkerLauncher(Protocol):
    """Starts workers somewhere and connects them to the host."""

    name: str

    async def launch(self, pack: str, python: Path, timeout: float) -> LaunchedWorker:
        """Start a worker serving ``pack`` from the venv whose interpreter is ``python``."""
        ...
