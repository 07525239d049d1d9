"""The multi-GPU split the broker hands a worker: INLINE_PARALLEL and the hardware."""

from __future__ import annotations

import pytest
from inline_core import Component, Estimate, Gpu, Inventory, place
from inline_host.workers._parallel import parse_parallel, plan_parallel

GIB = 1 << 30
EST = Estimate(components=(Component("t", "diffusion", 6 * 10**9, 12 * GIB),))


def inv(n: int, nvlink: bool) -> Inventory:
    gpus = tuple(Gpu(i, "H100", 80 * GIB, 80 * GIB, nvlink=nvlink) for i in range(n))
    return Inventory(ram_total_bytes=64 * GIB, ram_free_bytes=64 * GIB, gpus=gpus)


def test_degrees_parse_and_bad_values_are_named():
    assert parse_parallel("ulysses=2,ring=2") == {"ulysses": 2, "ring": 2}
    assert parse_parallel(None) is None and parse_parallel("auto") is None
    assert parse_parallel("off") == {}
    for bad in ("ulysses", "tensor=2", "ring=x", "ring=2,ring=2"):
        with pytest.raises(ValueError, match="INLINE_PARALLEL"):
            parse_parallel(bad)


@pytest.mark.parametrize(("nvlink", "kind"), [(True, "ulysses"), (False, "ring")])
def test_more_than_one_gpu_splits_by_the_interconnect(nvlink, kind):
    hw = inv(2, nvlink)
    assert plan_parallel(None, hw, place(hw, EST)) == (f"{kind}=2", ["cuda:0", "cuda:1"])
    assert plan_parallel("off", hw, place(hw, EST)) == (None, [])


def test_one_gpu_or_the_cpu_does_not_split_unless_asked():
    assert plan_parallel(None, inv(1, True), place(inv(1, True), EST)) == (None, [])
    cpu = inv(0, False)
    assert plan_parallel(None, cpu, place(cpu, EST, "cpu")) == (None, [])
    # asked for explicitly on a CPU machine: a gloo group of as many ranks
    assert plan_parallel("ulysses=2", cpu, place(cpu, EST, "cpu")) == ("ulysses=2", ["cpu"] * 2)
    assert plan_parallel("ulysses=2,ring=2", inv(4, True), place(inv(4, True), EST))[1] == [
        f"cuda:{i}" for i in range(4)
    ]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_the_brokers_placed_carries_the_plan_and_devices():
    from inline_core import Budget
    from inline_host.workers import Broker
    from inline_sdk.protocol import ModelSize, PlaceAsk

    size = ModelSize(name="/m/z", role="diffusion", params=1000, bytes=4000, slot="diffusion")
    ask = PlaceAsk(ask=1, components=[size])
    broker = Broker(inv(0, False), "cpu", Budget(), parallel="ulysses=2")
    broker.attach("w", "zimage", 1, None)
    answer = await broker.place("w", ask)
    assert (answer.parallel, answer.devices) == ("ulysses=2", ["cpu", "cpu"])
    assert broker.snapshot()["parallel"] == "ulysses=2"  # /v1/health's memory section
    alone = Broker(inv(0, False), "cpu", Budget())
    alone.attach("w", "zimage", 1, None)
    assert (await alone.place("w", ask)).parallel is None
    with pytest.raises(ValueError, match="INLINE_PARALLEL"):
        Broker(inv(0, False), "cpu", Budget(), parallel="tensor=2")
