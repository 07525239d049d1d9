"""The look on a call's way to a worker: one poll of its socket and its process's pidfd."""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys

import anyio
import anyio.abc
import pytest
from inline_host.workers._launcher import Liveness, ended

pytestmark = pytest.mark.anyio


def wait_readable(fd: int) -> None:
    """Block until ``fd`` polls readable (the process's exit, as an event)."""
    look = select.poll()
    look.register(fd, select.POLLIN)
    assert look.poll(10_000)


async def test_the_end_of_the_connection_is_seen_before_any_reader() -> None:
    host, worker = socket.socketpair()
    stream = await anyio.abc.SocketStream.from_socket(host)
    probe = Liveness(stream)
    assert not probe.ended() and not probe.ended()
    worker.close()
    assert probe.ended()
    await stream.aclose()


async def test_the_exit_of_the_process_is_seen_through_its_pidfd() -> None:
    host, worker = socket.socketpair()
    stream = await anyio.abc.SocketStream.from_socket(host)
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    pidfd = os.pidfd_open(child.pid)
    try:
        probe = Liveness(stream, exit_fd=pidfd)
        assert not probe.ended()
        os.kill(child.pid, signal.SIGKILL)
        wait_readable(pidfd)  # exited, not reaped; its socket (here: the pair) still open
        assert probe.ended()
    finally:
        child.wait()
        os.close(pidfd)
        worker.close()
        await stream.aclose()


async def test_what_the_launcher_knows_is_asked_first() -> None:
    host, worker = socket.socketpair()
    stream = await anyio.abc.SocketStream.from_socket(host)
    exited = [False]
    probe = Liveness(stream, lambda: exited[0])
    assert not probe.ended()
    exited[0] = True
    assert probe.ended()

    class Launched:
        def __init__(self) -> None:
            self.stream = stream

        def has_exited(self) -> bool:
            return exited[0]

    assert ended(Launched())  # type: ignore[arg-type]
    worker.close()
    await stream.aclose()
