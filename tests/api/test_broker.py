"""The memory broker in memory: placements from the policy, LRU eviction across workers, refusal
before any load, and what /v1/health shows. (Real workers: tests/models/test_memory.py.)"""

from __future__ import annotations

import anyio
import pytest
from inline_core import Budget, Gpu, Inventory
from inline_host.workers import Broker
from inline_sdk import Memory
from inline_sdk.protocol import ComponentPlan, HeldModel, Holding, ModelSize, PlaceAsk

pytestmark = pytest.mark.anyio
MB = 1 << 20
GB = 1 << 30
CPU_BOX = Inventory(ram_total_bytes=16 * GB, ram_free_bytes=12 * GB)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def plan(name: str, nbytes: int, device: str = "cpu") -> ComponentPlan:
    return ComponentPlan(name=name, role="diffusion", device=device, dtype="fp32", bytes=nbytes)


def ask(name: str, params: int, slot: str = "diffusion") -> PlaceAsk:
    size = ModelSize(name=name, role="diffusion", params=params, bytes=params * 4, slot=slot)
    return PlaceAsk(ask=1, components=[size])


class FakeWorker:
    """Evicts when asked, then reports, like a worker's ``Memory`` does."""

    def __init__(self, broker: Broker, key: str, models: list[HeldModel]) -> None:
        self.broker, self.key, self.models, self.evicted = broker, key, models, []
        broker.attach(key, key, 1, self.evict)
        broker.report(key, Holding(models=models))

    async def evict(self, slots: list[str]) -> None:
        self.evicted.extend(slots)
        self.models = [m for m in self.models if m.slot not in slots]
        await anyio.sleep(0)
        self.broker.report(self.key, Holding(models=self.models))


async def test_a_load_that_fits_is_answered_with_the_policy_plan():
    broker = Broker(CPU_BOX, "cpu", Budget())
    broker.attach("w", "zimage", 1, None)
    answer = await broker.place("w", ask("/m/a.safetensors", 10 * MB))
    assert answer.fits and answer.ask == 1
    (c,) = answer.components
    assert (c.device, c.dtype, c.quantization, c.offload) == ("cpu", "fp32", "none", "resident")


async def test_the_least_recently_used_model_of_another_worker_is_evicted_to_make_room():
    broker = Broker(CPU_BOX, "cpu", Budget(ram_bytes=100 * MB))
    old = HeldModel(slot="diffusion", name="/m/old", bytes=60 * MB, plan=plan("/m/old", 60 * MB),
                    last_used=1.0)  # fmt: skip
    recent = HeldModel(slot="vae", name="/m/vae", bytes=20 * MB, plan=plan("/m/vae", 20 * MB),
                       last_used=5.0)  # fmt: skip
    other = FakeWorker(broker, "other", [old, recent])
    broker.attach("me", "primitives", 2, None)
    answer = await broker.place("me", ask("/m/new", 15 * MB // 4 * 4))  # 60 MB in fp32
    assert answer.fits
    assert other.evicted == ["diffusion"]  # the oldest first, and only what was needed
    assert answer.components[0].quantization == "none"


async def test_what_cannot_be_evicted_shrinks_the_plan_to_int8():
    broker = Broker(CPU_BOX, "cpu", Budget(ram_bytes=100 * MB))
    pinned = HeldModel(slot="diffusion", name="/m/x", bytes=60 * MB, plan=plan("/m/x", 60 * MB))
    broker.attach("old", "oldpack", 1, None)  # an SDK 1.2 worker: cannot evict on request
    broker.report("old", Holding(models=[pinned]))
    answer = await broker.place("me", ask("/m/new", 15 * MB))  # 60 MB fp32, 15 MB int8
    assert answer.fits and answer.components[0].quantization == "int8"


async def test_the_slot_being_replaced_does_not_count_against_the_room():
    broker = Broker(CPU_BOX, "cpu", Budget(ram_bytes=100 * MB))
    mine = HeldModel(slot="diffusion", name="/m/a", bytes=80 * MB, plan=plan("/m/a", 80 * MB))
    broker.attach("me", "zimage", 1, None)
    broker.report("me", Holding(models=[mine]))
    answer = await broker.place("me", ask("/m/b", 20 * MB))  # 80 MB fp32: fits once /m/a goes
    assert answer.components[0].quantization == "none"


async def test_too_big_for_vram_and_ram_is_refused_with_the_sizes():
    box = Inventory(8 * GB, 6 * GB, (Gpu(0, "laptop", 6 * GB, 6 * GB),))
    broker = Broker(box, "gpu-max", Budget())
    answer = await broker.place("me", ask("/m/huge", 20 * GB))
    assert not answer.fits and "Won't fit" in answer.reason and "GiB" in answer.reason


async def test_snapshot_shows_budget_holdings_and_plans():
    broker = Broker(CPU_BOX, "cpu", Budget(ram_bytes=GB))
    broker.attach("w", "zimage", 7, None)
    await broker.place("w", ask("/m/a", 10 * MB))
    broker.report(
        "w", Holding(models=[HeldModel("diffusion", "/m/a", 40 * MB, plan("/m/a", 40 * MB))])
    )
    snap = broker.snapshot()
    assert snap["profile"] == "cpu" and snap["budget"]["cpu"]["bytes"] == GB
    assert snap["budget"]["cpu"]["usedBytes"] == 40 * MB
    (worker,) = snap["workers"]
    assert worker["pack"] == "zimage" and worker["pid"] == 7
    (model,) = worker["models"]
    assert model["plan"] == {"device": "cpu", "dtype": "fp32", "quantization": "none",
                             "offload": "resident"}  # fmt: skip
    assert "reason" in model
    broker.detach("w")
    assert broker.snapshot()["workers"] == []


def test_an_unknown_profile_is_refused():
    with pytest.raises(ValueError, match="INLINE_PROFILE"):
        Broker(CPU_BOX, "turbo")


def test_a_worker_without_a_broker_decides_alone():
    assert Memory(None).place([ModelSize(name="x", role="vae", params=1, bytes=4)]) is None


def test_the_worker_side_evicts_and_reports():
    sent: list[object] = []
    memory = Memory(sent.append)
    freed: list[str] = []
    memory.hold("vae", "/m/v", 4, plan("/m/v", 4), lambda: freed.append("vae"))
    memory.evict(["vae", "missing"])
    assert freed == ["vae"] and memory.held() == []
    assert isinstance(sent[-1], Holding) and sent[-1].models == []


async def test_one_ask_for_a_whole_render_gets_one_plan_that_fits_all_of_it_at_once():
    box = Inventory(64 * GB, 60 * GB, (Gpu(0, "16 GB card", 16 * GB, 16 * GB),))
    broker = Broker(box, "gpu-max", Budget())
    sizes = [
        ModelSize(name="z", role="diffusion", params=6_154_908_736, bytes=12_309_866_400),
        ModelSize(name="q", role="text-encoder", params=4_022_468_096, bytes=8_044_982_048),
        ModelSize(name="ae", role="vae", params=83_819_683, bytes=335_304_388),
    ]
    answer = await broker.place("w", PlaceAsk(ask=3, components=sizes, activation_bytes=918 * MB))
    # bf16 with the text encoder parked does not fit: it returns beside the transformer to encode
    assert answer.fits and not answer.park_text_encoder
    assert {(c.name, c.dtype, c.quantization, c.offload) for c in answer.components} == {
        ("z", "bf16", "int8", "resident"),
        ("q", "bf16", "int8", "resident"),
        ("ae", "bf16", "none", "resident"),
    }


async def test_replicas_pinned_to_two_gpus_are_each_planned_on_their_own_gpu():
    """A model held on GPU 0 leaves GPU 1's room whole: the replica pinned there loads beside
    it without evicting; a worker that sees every GPU loads on the first, so it must make
    room there."""
    gpus = tuple(Gpu(index=i, name=f"g{i}", total_bytes=24 * GB, free_bytes=24 * GB)
                 for i in range(2))  # fmt: skip
    broker = Broker(Inventory(64 * GB, 60 * GB, gpus), "gpu-max", Budget())
    params = 10 * GB  # 20 GB of bf16 weights: beside the 18 GB held, never on one 24 GB GPU
    held = HeldModel(slot="diffusion", name="/m/a", bytes=18 * GB,
                     plan=plan("/m/a", 18 * GB, "cuda"), last_used=1.0)  # fmt: skip
    first = FakeWorker(broker, "first", [held])
    broker._workers["first"].gpu = 0  # (FakeWorker attaches unpinned)
    broker.attach("second", "zimage", 2, None, gpu=1)
    answer = await broker.place("second", ask("/m/b", params))
    assert answer.fits and answer.components[0].offload == "resident"
    assert first.evicted == []  # GPU 1 is its own budget
    assert broker.used("cuda", gpu=0) == 18 * GB and broker.used("cuda", gpu=1) == 0
    assert broker.capacity("cuda", 1) == 24 * GB
    assert {w["pack"]: w.get("gpu") for w in broker.snapshot()["workers"]} == {
        "first": 0,
        "zimage": 1,
    }
    broker.attach("anywhere", "zimage", 3, None)  # sees both: it loads on GPU 0, where A is
    answer = await broker.place("anywhere", ask("/m/c", params))
    assert answer.fits and first.evicted == ["diffusion"]
