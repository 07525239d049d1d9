"""Where a worker runs: the ``WorkerLauncher`` seam.

The supervisor asks a launcher for a worker of a pack and gets back a byte stream speaking the
IPC protocol, plus a handle to stop the worker and read its log. Nothing outside the launcher
knows where the worker runs: the local and TCP launchers are in ``_launchers.py``, Ray's in
``_ray.py``, and ``_choice.py`` is the one place that picks one.
"""

from __future__ import annotations

import select
import weakref
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


#: What ``poll`` reports for a connection that reached its end (the peer closed, or it broke).
_GONE = select.POLLRDHUP | select.POLLHUP | select.POLLERR | select.POLLNVAL
#: Each stream's raw socket, looked up once (the lookup costs more than the look itself).
_sockets: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def ended(worker: LaunchedWorker) -> bool:
    """Whether ``worker`` is known to be gone right now, before the host's reader has seen it:
    its process exited (a child of this host), or its connection reached its end. It runs on
    every call's way to a worker, so it costs two system calls at most."""
    probe = getattr(worker, "has_exited", None)  # an ExitProbe
    if probe is not None and probe():
        return True
    stream = worker.stream
    try:
        sock = _sockets[stream]
    except KeyError:
        sock = _sockets[stream] = stream.extra(anyio.abc.SocketAttribute.raw_socket, None)
    except TypeError:  # a stream that takes no weak reference: looked up each time
        sock = stream.extra(anyio.abc.SocketAttribute.raw_socket, None)
    if sock is None:
        return False
    fd = sock.fileno()
    if fd < 0:
        return True
    # poll takes nothing from the reader: POLLRDHUP is the peer's end of the stream
    look = select.poll()
    look.register(fd, _GONE)
    return bool(look.poll(0))


class WorkerLauncher(Protocol):
    """Starts workers somewhere and connects them to the host."""

    name: str

    async def launch(self, pack: str, python: Path, timeout: float) -> LaunchedWorker:
        """Start a worker serving ``pack`` from the venv whose interpreter is ``python``."""
        ...
