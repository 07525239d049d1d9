"""Calls through real workers on the host's frame channel (both launchers): calls in flight at
once each get their own answer, and a worker that died between two calls is never sent the
second, whether the host's reader saw its end or not."""

from __future__ import annotations

import asyncio
import os
import select
import signal
from typing import Any

import anyio
import pytest
from inline_host import Engine
from inline_host.workers._channel import FrameProtocol
from inline_sdk.protocol import TextValue

pytestmark = pytest.mark.anyio


async def slept(supervisor: Any, tag: str) -> str:
    out = await supervisor.call("testpack", "testpack/sleep", "n", {"seconds": 0.0, "tag": tag}, {})
    value = out["text"].value
    assert isinstance(value, TextValue)
    return value.text


async def test_calls_in_flight_at_once_each_get_their_own_answer(settings):
    async with Engine.open(settings) as engine:
        supervisor = engine.supervisor
        got: dict[int, str] = {}

        async def one(i: int) -> None:
            got[i] = await slept(supervisor, str(i))

        async with anyio.create_task_group() as tg:
            for i in range(40):
                tg.start_soon(one, i)
        assert got == {i: f"slept 0.0 ({i})" for i in range(40)}
        proc = supervisor.workers()["testpack"]
        # the launchers' socket streams are read by the frame protocol, not a reader task
        assert isinstance(proc._channel, FrameProtocol)
        assert not proc.pending


@pytest.mark.parametrize("exited", [False, True], ids=["right-after-kill", "exited"])
async def test_a_worker_dead_between_two_calls_is_never_sent_the_second(settings, exited):
    """Three times: a call, its worker killed, and at once the next call (the host's loop runs
    nothing in between, so its reader cannot have seen the end): the next call goes to a fresh
    worker. With ``exited`` the process is gone (a zombie) before the call, else the kill has
    only just been sent."""
    async with Engine.open(settings) as engine:
        supervisor = engine.supervisor
        for i in range(3):
            assert await slept(supervisor, f"before {i}") == f"slept 0.0 (before {i})"
            dead = supervisor.workers()["testpack"]
            assert dead.pid is not None
            pidfd = os.pidfd_open(dead.pid)
            try:
                os.kill(dead.pid, signal.SIGKILL)
                if exited:  # block the loop until the process has exited (an event)
                    look = select.poll()
                    look.register(pidfd, select.POLLIN)
                    assert look.poll(10_000)
                assert await slept(supervisor, f"after {i}") == f"slept 0.0 (after {i})"
            finally:
                os.close(pidfd)
            fresh = supervisor.workers()["testpack"]
            assert fresh is not dead and fresh.pid != dead.pid
            assert not dead.alive


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_worker_asking_the_broker_gets_its_answer(settings, loop):
    """A broker request arrives on the frame channel outside any task (in the protocol's
    callback) and its answer is a task of the worker's: the call completes and the worker
    lives on, on a loop run as uvicorn runs the server's (``asyncio.run`` or uvloop's, not
    anyio's runner, which would have told every callback its library)."""

    async def main() -> None:
        async with Engine.open(settings) as engine:
            supervisor = engine.supervisor
            for mib in (1, 2):
                out = await supervisor.call("testpack", "testpack/place", "p", {"mib": mib}, {})
                value = out["text"].value
                assert isinstance(value, TextValue) and value.text == "cpu"
            first = supervisor.workers()["testpack"].pid
            assert await slept(supervisor, "after") == "slept 0.0 (after)"
            assert supervisor.workers()["testpack"].pid == first

    if loop == "uvloop":
        import uvloop

        uvloop.run(main())
    else:
        asyncio.run(main())
