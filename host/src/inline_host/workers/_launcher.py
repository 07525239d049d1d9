"""Where a worker runs: the ``WorkerLauncher`` seam.

The supervisor asks a launcher for a worker of a pack and gets back a byte stream speaking the
IPC protocol, plus a handle to stop the worker and read its log. Nothing outside the launcher
knows where the worker runs: the local and TCP launchers are in ``_launchers.py``, Ray's in
``_ray.py``, and ``_choice.py`` is the one place that picks one.
"""

from __future__ import annotations

import select
from collections.abc import AsyncIterator, Callable
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
    #: The worker's own ``/dev/shm`` (a sandboxed one's: it sees no other segment); None: the
    #: machine's.
    shm_dir: Path | None
    #: Whether it runs in a sandbox (it reads uploaded assets only from its pack's view).
    sandboxed: bool

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


class Liveness:
    """Whether one worker is known to be gone right now, before the host's reader has seen
    it: its process exited or is past serving (``exited``, and ``exit_fd``: a pidfd, readable
    once the process has exited), or its connection reached its end. Built once per worker; a
    look runs on every call's way to the worker, so it costs one ``poll`` of the socket and
    the pidfd together, and whatever ``exited`` costs."""

    def __init__(
        self,
        stream: anyio.abc.ByteStream,
        exited: Callable[[], bool] | None = None,
        exit_fd: int | None = None,
    ) -> None:
        self._exited = exited
        self._sock: Any = stream.extra(anyio.abc.SocketAttribute.raw_socket, None)
        self._look = select.poll()
        self._watched = False
        if self._sock is not None and self._sock.fileno() >= 0:
            # poll takes nothing from the reader: POLLRDHUP is the peer's end of the stream
            self._look.register(self._sock.fileno(), _GONE)
            self._watched = True
        if exit_fd is not None:
            self._look.register(exit_fd, select.POLLIN)
            self._watched = True

    def ended(self) -> bool:
        if self._exited is not None and self._exited():
            return True
        if self._sock is not None and self._sock.fileno() < 0:
            return True  # closed here
        return self._watched and bool(self._look.poll(0))


def liveness(worker: LaunchedWorker) -> Liveness:
    """The worker's own ``Liveness`` where it makes one (``liveness()``), else one that looks
    at its stream and, for an ``ExitProbe``, its ``has_exited``."""
    make = getattr(worker, "liveness", None)
    if make is not None:
        return make()
    return Liveness(worker.stream, worker.has_exited if isinstance(worker, ExitProbe) else None)


def ended(worker: LaunchedWorker) -> bool:
    """Whether ``worker`` is known to be gone right now (see ``Liveness``; a caller that asks
    often keeps the worker's ``liveness`` instead)."""
    return liveness(worker).ended()


class WorkerLauncher(Protocol):
    """Starts workers somewhere and connects them to the host."""

    name: str

    async def launch(
        self, pack: str, python: Path, timeout: float, *, gpu: int | None = None
    ) -> LaunchedWorker:
        """Start a worker serving ``pack`` from the venv whose interpreter is ``python``;
        with ``gpu`` (an NVML index), one that sees only that GPU (a launcher that places
        workers itself, such as Ray's, leaves it to its scheduler)."""
        ...


def gpu_env(gpu: int | None) -> dict[str, str]:
    """The variables that show a worker only GPU ``gpu`` (by NVML's index, which is the PCI
    bus order; CUDA's own default order is fastest first); none for every GPU."""
    if gpu is None:
        return {}
    return {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": str(gpu)}
