"""The multi-GPU split the broker hands a worker: INLINE_PARALLEL and the hardware."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from inline_core import Component, Estimate, Gpu, Inventory, place
from inline_host.workers._parallel import parallel_problem, parse_parallel, plan_parallel

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
    # xfuser has no PipeFusion for Z-Image: refused as such, never as a malformed value
    with pytest.raises(ValueError, match=r"pipefusion is not available for Z-Image.*ulysses=N"):
        parse_parallel("ulysses=2,pipefusion=2")


@pytest.mark.parametrize(("nvlink", "kind"), [(True, "ulysses"), (False, "ring")])
def test_more_than_one_gpu_splits_by_the_interconnect(nvlink, kind):
    hw = inv(2, nvlink)
    assert plan_parallel(None, hw, place(hw, EST)) == (f"{kind}=2", ["cuda:0", "cuda:1"])
    assert plan_parallel("off", hw, place(hw, EST)) == (None, [])


def test_one_gpu_or_the_cpu_does_not_split_unless_asked():
    assert plan_parallel(None, inv(1, True), place(inv(1, True), EST)) == (None, [])
    cpu = inv(0, False)
    assert plan_parallel(None, cpu, place(cpu, EST, "cpu")) == (None, [])
    # CPU ranks only when asked for (INLINE_PARALLEL_DEVICE=cpu): a gloo group of as many ranks
    assert plan_parallel("ulysses=2", cpu, place(cpu, EST, "cpu"), "cpu") == (
        "ulysses=2",
        ["cpu"] * 2,
    )
    assert plan_parallel("ulysses=2", cpu, place(cpu, EST, "cpu")) == (None, [])
    assert plan_parallel("ulysses=2,ring=2", inv(4, True), place(inv(4, True), EST))[1] == [
        f"cuda:{i}" for i in range(4)
    ]


@pytest.mark.parametrize(
    ("raw", "gpus", "device", "refused"),
    [
        ("ulysses=2", 0, None, "2 ranks need 2 GPUs and this machine has 0"),
        ("ulysses=4", 2, None, "4 ranks need 4 GPUs and this machine has 2"),
        ("ulysses=2", 4, None, "2 ranks need 2 GPUs and this machine has 4"),
        ("ulysses=2", 0, "cpu", None),  # asked for: CPU ranks
        ("ring=2", 0, "cpu", "ring attention is not built for CPU ranks"),
        ("ulysses=2,ring=2", 4, None, None),
        ("auto", 0, None, None),
        ("off", 3, None, None),
        ("ulysses=2", 2, "tpu", "INLINE_PARALLEL_DEVICE='tpu'"),
        ("tensor=2", 2, None, "INLINE_PARALLEL='tensor=2'"),
    ],
)
def test_degrees_that_do_not_match_the_gpus_are_refused_in_one_line(raw, gpus, device, refused):
    problem = parallel_problem(raw, inv(gpus, True), device)
    if refused is None:
        assert problem is None
    else:
        assert problem is not None and refused in problem and "\n" not in problem
        if "ranks need" in refused:
            assert "INLINE_PARALLEL_DEVICE=cpu" in problem  # the way to CPU ranks is named


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
    broker = Broker(inv(0, False), "cpu", Budget(), parallel="ulysses=2", parallel_device="cpu")
    broker.attach("w", "zimage", 1, None)
    answer = await broker.place("w", ask)
    assert (answer.parallel, answer.devices) == ("ulysses=2", ["cpu", "cpu"])
    assert broker.snapshot()["parallel"] == "ulysses=2"  # /v1/health's memory section
    alone = Broker(inv(0, False), "cpu", Budget())
    alone.attach("w", "zimage", 1, None)
    assert (await alone.place("w", ask)).parallel is None
    with pytest.raises(ValueError, match="INLINE_PARALLEL"):
        Broker(inv(0, False), "cpu", Budget(), parallel="tensor=2")
    with pytest.raises(ValueError, match="2 ranks need 2 GPUs and this machine has 0"):
        Broker(inv(0, False), "cpu", Budget(), parallel="ulysses=2")


def _serve(tmp_path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "INLINE_DATA_DIR": str(tmp_path / "data"), "INLINE_PORT": "0", **env}
    full.pop("INLINE_PARALLEL_DEVICE", None)
    return subprocess.run(
        [sys.executable, "-m", "inline_host.cli._main", "serve", *args],
        env=full, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_serve_refuses_degrees_the_gpus_do_not_match_with_one_line_and_exit_2(tmp_path):
    out = _serve(tmp_path, INLINE_PARALLEL="ulysses=7")
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert lines[-1].startswith("error: INLINE_PARALLEL=ulysses=7: 7 ranks need 7 GPUs"), lines
    assert "Traceback" not in out.stderr and "serving" not in out.stderr


def test_multi_gpu_is_ulysses_over_every_gpu_and_refused_without_two(tmp_path):
    from inline_host.workers import probe

    if len(probe().gpus) >= 2:
        pytest.skip("this machine has GPUs to split over")
    out = _serve(tmp_path, "--multi-gpu")
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("error: --multi-gpu splits one image")
