"""The per-worker cache and runtime stats a node reaches through ``ctx`` (``ctx.cache``,
``ctx.stats``), and the ``Stats`` message behind the ``stats`` capability."""

from __future__ import annotations

import threading

from inline_sdk import WorkerCache, WorkerStats
from inline_sdk.protocol import CAP_STATS, FrameCodec, FromWorker, Placed, Stats


def test_the_cache_makes_each_value_once_across_threads():
    cache = WorkerCache()
    made: list[int] = []
    gate = threading.Barrier(8)

    def get() -> None:
        gate.wait()
        cache.get("k", lambda: made.append(1) or object())

    threads = [threading.Thread(target=get) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert made == [1]
    value = cache.peek("k")
    assert value is not None and cache.pop("k") is value and cache.peek("k") is None


def test_stats_are_sent_as_a_stats_message_that_round_trips():
    sent: list[object] = []
    stats = WorkerStats(sent.append)
    stats.update("batching", {"batches": 1, "sizes": {"4": 1}})
    stats.update("batching", {"batches": 2})
    assert stats.snapshot() == {"batching": {"batches": 2, "sizes": {"4": 1}}}
    assert isinstance(sent[-1], Stats)
    codec = FrameCodec(FromWorker)
    frame = codec.encode(sent[-1])
    assert codec.decode(frame[4:]) == Stats(
        sections={"batching": {"batches": 2, "sizes": {"4": 1}}}
    )
    assert CAP_STATS == "stats"


def test_stats_without_the_capability_only_keep_figures():
    stats = WorkerStats(None)
    stats.update("compile", {"mode": "FUSED"})
    assert stats.snapshot()["compile"]["mode"] == "FUSED"


def test_placed_carries_the_parallel_plan_and_devices():
    p = Placed(ask=1, fits=True, reason="", parallel="ulysses=2", devices=["cuda:0", "cuda:1"])
    assert (p.parallel, p.devices) == ("ulysses=2", ["cuda:0", "cuda:1"])
    assert Placed(ask=1, fits=True, reason="").parallel is None  # an older host sends none
