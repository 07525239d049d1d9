"""Memory through real workers: placements from the host's broker are applied (int8 really halves
the weights), switching checkpoints frees the old one, and the broker evicts another worker's
least-recently-used model to make room.

Measured from /proc/<worker pid>/status as ``RssAnon + RssFile``: a full-precision file in the
file's own dtype stays memory-mapped (its weights are file pages, not anonymous memory: no copy),
while int8 weights are anonymous; the sum is what the weights occupy. ``RssShmem`` (the output
arena) is left out."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from inline_core import Budget
from inline_host import Engine
from inline_sdk.protocol import MediaValue

from ..e2e._graphs import n, request
from .conftest import HERE, Tiny, install_comfy_layout

pytestmark = pytest.mark.anyio
MB = 1 << 20
WIDE_A = "wide_a.safetensors"
WIDE_B = "wide_b.safetensors"
TINY = "tiny_z_image_turbo.safetensors"


@pytest.fixture(scope="module", autouse=True)
def models(tiny: Tiny, settings) -> Path:
    """The tiny models, plus one ~60 MB transformer under two names (two checkpoints)."""
    root = install_comfy_layout(tiny, settings.models_dir)
    wide = root / "diffusion_models" / WIDE_A
    proc = subprocess.run(
        [str(tiny.python), str(HERE / "_wide.py"), str(wide)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    shutil.copy(wide, root / "diffusion_models" / WIDE_B)
    return root


def status(pid: int | None) -> dict[str, int]:
    """The ``Rss*`` lines of /proc/PID/status, in bytes."""
    assert pid is not None
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Rss"):
            key, value = line.split(":", 1)
            out[key] = int(value.split()[0]) * 1024
    return out


def resident(pid: int | None) -> int:
    """Weights' resident bytes: anonymous memory plus mapped file pages (not shared memory)."""
    s = status(pid)
    return s["RssAnon"] + s["RssFile"]


async def click(engine: Engine, model: str) -> bytes:
    engine.cache.clear()
    doc = request(
        "z",
        n("p", "input/text", {"text": "a red fox in snow"}),
        n("z", "alibaba/z-image-turbo",
          {"width": 256, "height": 256, "steps": 1, "seed": 7, "model": model},
          prompt=("p", "text")),
    )  # fmt: skip
    result = await engine.run(doc)
    value = result.outputs["image"]
    assert isinstance(value.value, MediaValue)
    return engine.read_bytes(value)


def held(engine: Engine, pack: str) -> dict[str, dict[str, Any]]:
    """What the broker says ``pack``'s worker holds, by file name."""
    snap = engine.supervisor.broker.snapshot()
    return {
        Path(m["file"]).name: m for w in snap["workers"] if w["pack"] == pack for m in w["models"]
    }


async def test_the_worker_applies_the_brokers_placements(engine: Engine, models):
    broker = engine.supervisor.broker

    await click(engine, WIDE_A)
    plan = held(engine, "zimage")[WIDE_A]["plan"]
    assert plan == {"device": "cpu", "dtype": "fp32", "quantization": "none", "offload": "resident"}
    await click(engine, TINY)  # another checkpoint in the slot: the wide one is let go
    assert WIDE_A not in held(engine, "zimage")

    # a RAM budget fp32 cannot meet (weights + the policy's ~57 MiB of activations at 256x256):
    # the policy picks int8 weight-only, and the worker applies it
    broker.budget = Budget(ram_bytes=100 * MB)
    try:
        png = await click(engine, WIDE_B)
    finally:
        broker.budget = Budget()
    assert png.startswith(b"\x89PNG")  # int8 still renders
    plan = held(engine, "zimage")[WIDE_B]["plan"]
    assert plan["quantization"] == "int8", plan
    health = engine.supervisor.broker.snapshot()
    assert health["budget"]["cpu"]["usedBytes"] > 0


def primitive_graph(model: str) -> list[dict[str, Any]]:
    return [
        n("p", "input/text", {"text": "a lighthouse"}),
        n("m", "load/diffusion-model", {"file": model}),
        n("t", "load/text-encoder", {"file": "tiny_qwen3.safetensors"}),
        n("c", "encode/text", {}, text_encoder=("t", "text_encoder"), prompt=("p", "text")),
        n("l", "latent/empty", {"width": 256, "height": 256}),
        n("s", "sample", {"steps": 1, "cfg": 1.0, "seed": 3},
          model=("m", "model"), positive=("c", "conditioning"), latent=("l", "latent")),
    ]  # fmt: skip


async def test_broker_evicts_another_workers_model_to_make_room(engine: Engine):
    broker = engine.supervisor.broker
    await click(engine, WIDE_A)  # the zimage worker holds the wide model in fp32
    zpid = engine.supervisor.workers()["zimage"].pid
    a = held(engine, "zimage")[WIDE_A]
    holding = resident(zpid)
    # room for one wide model in fp32 (and the tiny ones), not two
    broker.budget = Budget(ram_bytes=int(a["bytes"] * 1.5))
    try:
        engine.cache.clear()
        await engine.run(request("s", *primitive_graph(WIDE_B)))
    finally:
        broker.budget = Budget()
    assert WIDE_A not in held(engine, "zimage")  # evicted from the other worker
    mine = held(engine, "primitives")[WIDE_B]
    assert mine["plan"]["quantization"] == "none"  # room was made: no need to shrink
    freed = holding - resident(zpid)
    print(f"evicted from the zimage worker: {freed / MB:.1f} MiB of {a['bytes'] / MB:.1f} MiB")
    assert freed > 0.7 * a["bytes"]


def test_int8_halves_the_weight_bytes_and_freeing_gives_them_back(models, pack_python):
    """RssAnon of fresh processes loading the same file: bf16 in memory, then int8 weight-only;
    and what is left once the model is let go (as a slot switching checkpoints does)."""
    probe = HERE / "_quant_probe.py"
    wide = models / "diffusion_models" / WIDE_A

    def measure(quantization: str) -> dict[str, int]:
        out = subprocess.run(
            [str(pack_python), str(probe), str(wide), "bfloat16", quantization],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    bf16, int8 = measure("none"), measure("int8")
    weights = wide.stat().st_size // 2  # the file is fp32: its weights in bf16 are half of it
    assert bf16["loaded"] > 0.8 * weights, (bf16, weights)
    assert int8["loaded"] < 0.6 * bf16["loaded"], (int8, bf16)  # linear weights: 1 byte, not 2
    assert bf16["after_free"] < 0.2 * bf16["loaded"], bf16  # switching checkpoints frees
