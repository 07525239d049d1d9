"""A call's mailbox and the worker's one watchdog for all its calls' deadlines."""

from __future__ import annotations

import asyncio

import anyio
import anyio.lowlevel
import pytest
from inline_host.workers._pending import TIMED_OUT, Mailbox, Watchdog

pytestmark = pytest.mark.anyio


async def test_a_mailbox_hands_its_messages_over_in_order() -> None:
    box = Mailbox(asyncio.get_running_loop())
    box.put("progress")
    got: list[str] = [await box.get()]

    async def later() -> None:
        box.put("stream")
        box.put("done")

    async with anyio.create_task_group() as tg:
        tg.start_soon(later)
        got += [await box.get(), await box.get()]
    assert got == ["progress", "stream", "done"]


async def test_a_mailbox_without_an_asyncio_loop_waits_on_an_event() -> None:
    box = Mailbox(None)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_put_soon, box, "done")
        assert await box.get() == "done"


async def _put_soon(box: Mailbox, msg: str) -> None:
    await anyio.lowlevel.checkpoint()
    box.put(msg)


async def test_a_cancelled_wait_leaves_the_mailbox_usable() -> None:
    box = Mailbox(asyncio.get_running_loop())
    with anyio.move_on_after(0):
        await box.get()
    box.put("done")
    assert await box.get() == "done"


async def test_a_call_past_its_deadline_is_told_so_and_only_it() -> None:
    boxes = {1: Mailbox(asyncio.get_running_loop()), 2: Mailbox(asyncio.get_running_loop())}
    dog = Watchdog(boxes)
    async with anyio.create_task_group() as tg:
        tg.start_soon(dog.run)
        dog.arm(boxes[1], 3600)
        await anyio.lowlevel.checkpoint()  # the watchdog sleeps until the first deadline
        dog.arm(boxes[2], 0.05)  # an earlier one wakes it
        with anyio.fail_after(10):
            assert await boxes[2].get() is TIMED_OUT
        assert boxes[2].expired and not boxes[1].expired
        dog.stop()
    assert not boxes[1]._items


async def test_a_deadline_armed_before_the_watchdog_runs_is_kept() -> None:
    box = Mailbox(asyncio.get_running_loop())
    dog = Watchdog({1: box})
    dog.arm(box, 0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(dog.run)
        with anyio.fail_after(10):
            assert await box.get() is TIMED_OUT
        dog.stop()


async def test_a_stopped_watchdog_ends() -> None:
    dog = Watchdog({})
    dog.stop()
    with anyio.fail_after(10):
        await dog.run()
