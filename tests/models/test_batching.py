"""Cross-request batching, the worker group and compile on the tiny Z-Image: the runtime library
in a pack venv (``_batch_probe``), and concurrent runs through host and real workers."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from inline_host import Engine, Settings
from inline_sdk.protocol import MediaValue

from ..e2e._graphs import n, request
from ._png import max_abs_diff
from .conftest import Tiny, install_comfy_layout

PROBE = Path(__file__).with_name("_batch_probe.py")


@pytest.fixture(scope="module")
def probe(tiny: Tiny) -> Any:
    """Runs probe modes in one pack-venv process (imports cost seconds each)."""
    results: dict[str, Any] = {}

    def run(*modes: str) -> dict[str, Any]:
        missing = [m for m in modes if m not in results]
        if missing:
            out = subprocess.run(
                [str(tiny.python), str(PROBE), str(tiny.root), ",".join(missing)],
                capture_output=True, text=True, timeout=900,
                env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"},
            )  # fmt: skip
            assert out.returncode == 0, out.stderr[-4000:]
            results.update(json.loads(out.stdout.strip().splitlines()[-1]))
        return {m: results[m] for m in modes}

    run("batch", "cancel", "fallback", "compile", "modes", "group")
    return run


def test_a_batch_of_four_equals_each_request_alone(probe):
    for guidance in ("g0.0", "g1.5"):  # without and with classifier-free guidance
        r = probe("batch")["batch"][guidance]
        assert r["sizes"] == {"4": 1}  # one batch of four formed
        assert r["pixel_diff"] <= 1, r  # of 255, CPU fp32
        assert r["latent_diff"] < 1e-3, r
        assert r["distinct"] == 4  # each item its own seed and prompt
        assert r["steps"] == [[1, 2, 3, 4]] * 4  # each item its own progress


def test_a_cancelled_item_leaves_the_batch_and_the_others_go_on(probe):
    r = probe("cancel")["cancel"]
    assert r["cancelled"] == "Cancelled"
    assert r["steps_of_cancelled"] == [1, 2]
    assert r["others_diff"] < 1e-3


def test_a_failing_batch_falls_back_to_one_by_one(probe):
    r = probe("fallback")["fallback"]
    assert r["fallbacks"] == 1
    assert r["bad"] == "RuntimeError"  # the bad item's own error, from running alone
    assert r["others_diff"] == 0.0  # the others ran alone: exactly the local loop


def test_forced_fused_compile_matches_eager(probe):
    r = probe("compile")["compile"]
    assert r["stats"]["failed"] is None, r
    assert r["stats"]["mode"] == "FUSED"
    assert r["stats"]["warmups"]  # the warm-up per shape is recorded (and logged)
    assert r["diff"] < 1e-3, r
    # a compile that fails falls back to eager, said once, never fatal
    assert r["fallback_diff"] == 0.0
    assert r["fallback_stats"]["mode"] == "eager"
    assert r["fallback_stats"]["failed"].startswith("RuntimeError: inductor: no compiler")


def test_compile_is_opt_in_by_env_or_sidecar_graphed_on_cuda_fused_elsewhere(probe):
    r = probe("modes")["modes"]
    assert r["default"] == ["eager", "eager"]  # never on by default
    assert r["sidecar"] == ["fused", "graphed"]
    assert r["env"] == ["fused", "graphed"]
    assert r["forced"] == ["fused", "fused"]


def test_a_two_rank_gloo_group_starts_calls_cancels_survives_a_crash_and_shuts_down(probe):
    r = probe("group")["group"]
    # the ranks split the sequence (test_sequence_parallel checks the halves and the LoRA)
    assert r["stats"]["backend"] == "gloo" and r["stats"]["world"] == 2
    assert r["stats"]["split"] is True and r["stats"]["ranksAgree"] is True
    assert r["diff"] == 0.0  # the group's result equals the single-process one
    assert r["steps"] == [1, 2, 3, 4]  # progress from rank 0, every step
    assert r["cancel"] == "Cancelled" and r["same_group_after_cancel"]
    assert r["crash"].startswith("GroupFailed: a rank of the worker group died"), r["crash"]
    assert r["restarts"] == 1 and r["after_crash_diff"] == 0.0  # a fresh group next call
    assert r["shutdown_exit"] == 0
    assert r["orphan_exit"] == 0  # the group goes when the worker does


# through host and workers ------------------------------------------------------------------
@pytest.fixture(scope="module")
def batching_env() -> Iterator[None]:
    """Workers of this module batch up to 4 and wait until 4 calls are in (never a timing
    guess: the window ends as soon as the batch is full)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("INLINE_MAX_BATCH", "4")
        mp.setenv("INLINE_BATCH_WINDOW_MS", "600000")
        yield


@pytest.fixture(scope="module")
async def engine(
    settings: Settings, netguard_log: Path, batching_env: None
) -> AsyncIterator[Engine]:
    async with Engine.open(settings) as eng:
        yield eng


@pytest.mark.anyio
async def test_concurrent_runs_batch_and_health_reports_it(engine: Engine, tiny: Tiny, settings):
    install_comfy_layout(tiny, settings.models_dir)
    case = tiny.case("t2i_seed7")
    prompts = [case["prompt"], "a cat", "a bowl of fruit", "a lighthouse at dusk"]
    images: list[bytes] = [b""] * 4

    async def one(i: int) -> None:
        params = {"width": case["width"], "height": case["height"], "steps": case["steps"],
                  "seed": case["seed"] + i, "guidance": 0.0}  # fmt: skip
        doc = request(
            "z",
            n("p", "input/text", {"text": prompts[i]}),
            n("z", "alibaba/z-image-turbo", params, prompt=("p", "text")),
        )
        result = await engine.run(doc)
        value = result.outputs["image"]
        assert isinstance(value.value, MediaValue)
        images[i] = engine.read_bytes(value)

    with anyio.fail_after(600):
        async with anyio.create_task_group() as tg:
            for i in range(4):
                tg.start_soon(one, i)
    # the batched item equals diffusers' pipeline run alone on the same request
    assert max_abs_diff(images[0], tiny.reference("t2i_seed7")) <= 1
    assert len(set(images)) == 4
    worker = engine.supervisor.workers()["zimage"]
    batching = worker.describe()["runtime"]["batching"]
    assert batching["sizes"] == {"4": 1} and batching["batches"] == 1
    assert batching["maxBatch"] == 4
    assert worker.describe()["runtime"]["decodeBatching"]["largest"] == 4


def test_zimage_uses_only_the_public_runtime():
    src = Path(__file__).resolve().parents[2] / "packs" / "zimage" / "src"
    for path in src.rglob("*.py"):
        text = path.read_text()
        assert "inline_primitives._" not in text, path  # no private module of primitives
    runtime = src.parent.parent / "primitives" / "src" / "inline_primitives" / "runtime"
    for path in runtime.glob("*.py"):  # the per-worker cache goes through ctx, never a global
        assert "CACHE = " not in path.read_text(), path
