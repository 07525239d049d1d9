"""Node slots: ``concurrency`` calls at once per node type, the earliest run served first."""

from __future__ import annotations

import anyio
import pytest
from inline_host.runs._slots import NodeSlots

pytestmark = pytest.mark.anyio


async def test_a_freed_slot_goes_to_the_earliest_run_not_the_first_to_arrive():
    slots = NodeSlots()
    order: list[str] = []
    release = anyio.Event()
    holding = anyio.Event()

    async def holder() -> None:
        async with slots.hold("sample", 1, order=0):
            holding.set()
            await release.wait()

    async def call(name: str, run_order: int, arrived: anyio.Event) -> None:
        arrived.set()
        async with slots.hold("sample", 1, order=run_order):
            order.append(name)

    async with anyio.create_task_group() as tg:
        tg.start_soon(holder)
        await holding.wait()
        late_arrived, early_arrived = anyio.Event(), anyio.Event()
        tg.start_soon(call, "later run, arrived first", 7, late_arrived)
        await late_arrived.wait()
        tg.start_soon(call, "earlier run, arrived second", 3, early_arrived)
        await early_arrived.wait()
        await anyio.wait_all_tasks_blocked()
        assert slots.waiting() == {"sample": 2}
        release.set()
    assert order == ["earlier run, arrived second", "later run, arrived first"]
    assert slots.waiting() == {}


async def test_concurrency_bounds_calls_at_once_and_a_cancelled_waiter_leaves():
    slots = NodeSlots()
    inside, peak = 0, 0
    gate = anyio.Event()

    async def call(i: int) -> None:
        nonlocal inside, peak
        async with slots.hold("decode", 2, order=i):
            inside += 1
            peak = max(peak, inside)
            await gate.wait()
            inside -= 1

    async with anyio.create_task_group() as tg:
        for i in range(5):
            tg.start_soon(call, i)
        await anyio.wait_all_tasks_blocked()
        assert inside == 2 and slots.waiting() == {"decode": 3}
        with anyio.CancelScope() as scope:
            scope.cancel()
            async with slots.hold("decode", 2, order=99):
                pytest.fail("a cancelled waiter must not get the slot")
        gate.set()
    assert peak == 2 and inside == 0 and slots.waiting() == {}
