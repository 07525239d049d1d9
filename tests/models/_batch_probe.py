"""Cross-request batching, compile and the worker group on the tiny Z-Image, through the
real runtime library (run in a pack venv): ``python _batch_probe.py TINY_ROOT MODE[,MODE]``,
prints JSON.

Modes: ``batch`` (4 requests batched vs each alone, one with guidance, progress per item),
``cancel`` (one item cancelled mid-batch, the others go on), ``fallback`` (a batch with a bad
item falls back to one by one), ``compile`` (forced FUSED vs eager), ``group`` (a real 2-rank
gloo group: start, call, progress, cancel, rank crash, shutdown).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from _probe_ctx import probe_context

PROMPTS = ["a red fox in snow", "a cat", "a lighthouse at dusk, 35mm film", "a bowl of fruit"]


def load(root: Path, ctx: Any) -> dict[str, Any]:
    from inline_primitives import inspect_model

    comfy = root / "comfy"
    refs = {
        "diffusion": inspect_model(comfy / "diffusion_models/tiny_z_image_turbo.safetensors",
                                   "diffusion"),
        "vae": inspect_model(comfy / "vae/tiny_ae.safetensors", "vae"),
        "text_encoder": inspect_model(comfy / "text_encoders/tiny_qwen3.safetensors",
                                      "text_encoder"),
    }  # fmt: skip
    from inline_primitives.runtime import get_models

    return get_models(refs, ctx)


def requests(
    models: dict[str, Any], n: int, *, guidance: float = 0.0, steps: int = 4, side: int = 32
) -> list:
    import torch
    from inline_primitives.runtime import DenoiseRequest, encode_prompts

    te = models["text_encoder"]
    out = []
    for i in range(n):
        pos = encode_prompts(te, [PROMPTS[i % len(PROMPTS)]])
        neg = encode_prompts(te, ["blurry"]) if guidance > 0 else None
        out.append(
            DenoiseRequest(
                positive=pos, negative=neg, latent=torch.zeros(1, 16, side, side), steps=steps,
                guidance=guidance, sampler="euler", scheduler="simple", seed=100 + i,
            )
        )  # fmt: skip
    return out


def concurrently(denoiser: Any, reqs: list) -> list[Any]:
    """Submit every request from its own thread; results (or the exception) in order."""
    results: list[Any] = [None] * len(reqs)

    def one(i: int) -> None:
        try:
            results[i] = denoiser.denoise(reqs[i])
        except BaseException as exc:
            results[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(reqs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    return results


def pixel_diff(vae: Any, a: Any, b: Any) -> int:
    import numpy as np
    from inline_primitives.runtime import decode

    pa, pb = decode(vae, a)[0], decode(vae, b)[0]
    return int(np.abs(pa.astype(int) - pb.astype(int)).max())


def batched(models: dict[str, Any], n: int) -> Any:
    from inline_primitives.runtime import BatchedDenoiser

    # a long window that ends as soon as n calls are in: deterministic, never a timing guess
    return BatchedDenoiser(models["diffusion"], limit=n, window_s=600.0)


def mode_batch(models: dict[str, Any]) -> dict[str, Any]:
    from inline_primitives.runtime import LocalDenoiser

    out: dict[str, Any] = {}
    for guidance in (0.0, 1.5):
        reqs = requests(models, 4, guidance=guidance)
        steps_seen: dict[int, list[int]] = {i: [] for i in range(4)}
        for i, r in enumerate(reqs):
            r.on_step = lambda s, n, x, i=i, seen=steps_seen: seen[i].append(s)
        local = LocalDenoiser(models["diffusion"])
        alone = [local.denoise(r) for r in requests(models, 4, guidance=guidance)]
        den = batched(models, 4)
        got = concurrently(den, reqs)
        pairs = list(zip(alone, got, strict=True))
        out[f"g{guidance}"] = {
            "sizes": den.gatherer.stats.sizes,
            "latent_diff": max(float((a - b).abs().max()) for a, b in pairs),
            "pixel_diff": max(pixel_diff(models["vae"], a, b) for a, b in pairs),
            "steps": [steps_seen[i] for i in range(4)],
            "distinct": len({round(float(g.sum()), 3) for g in got}),
        }  # fmt: skip
    return out


def mode_cancel(models: dict[str, Any]) -> dict[str, Any]:
    from inline_primitives.runtime import LocalDenoiser

    reqs = requests(models, 3)
    stop = threading.Event()
    steps: list[int] = []

    def on_step(s: int, n: int, x: Any) -> None:
        steps.append(s)
        if s == 2:
            stop.set()

    reqs[1].on_step = on_step
    reqs[1].cancelled = stop.is_set
    got = concurrently(batched(models, 3), reqs)
    alone = [LocalDenoiser(models["diffusion"]).denoise(r) for r in requests(models, 3)]
    return {
        "cancelled": type(got[1]).__name__,
        "steps_of_cancelled": steps,
        "others_diff": max(float((alone[i] - got[i]).abs().max()) for i in (0, 2)),
    }


def mode_fallback(models: dict[str, Any]) -> dict[str, Any]:
    from inline_primitives.runtime import LocalDenoiser

    reqs = requests(models, 3)
    bad = reqs[1].positive
    bad.embeds = [e[:, :3] for e in bad.embeds]  # features the transformer cannot read
    den = batched(models, 3)
    got = concurrently(den, reqs)
    alone = [LocalDenoiser(models["diffusion"]).denoise(r) for r in requests(models, 3)]
    return {
        "bad": type(got[1]).__name__,
        "fallbacks": den.gatherer.stats.fallbacks,
        "others_diff": max(float((alone[i] - got[i]).abs().max()) for i in (0, 2)),
    }


def mode_compile(models: dict[str, Any]) -> dict[str, Any]:
    from inline_primitives.runtime import CompiledTransformer, LocalDenoiser
    from inline_sdk import WorkerStats

    stats = WorkerStats()
    eager = LocalDenoiser(models["diffusion"]).denoise(requests(models, 1, steps=2)[0])
    fused = CompiledTransformer(models["diffusion"], "fused", stats)
    got = LocalDenoiser(fused).denoise(requests(models, 1, steps=2)[0])
    out = {"diff": float((eager - got).abs().max()), "stats": stats.snapshot()["compile"]}

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("inductor: no compiler")

    fused._compiled = broken  # a compile that fails at a new shape's warm-up
    fallen = LocalDenoiser(fused).denoise(requests(models, 1, steps=2, side=16)[0])
    again = LocalDenoiser(fused).denoise(requests(models, 1, steps=2, side=16)[0])
    alone = LocalDenoiser(models["diffusion"]).denoise(requests(models, 1, steps=2, side=16)[0])
    out["fallback_diff"] = max(
        float((fallen - alone).abs().max()), float((again - alone).abs().max())
    )
    out["fallback_stats"] = stats.snapshot()["compile"]
    return out


def mode_modes(root: Path) -> dict[str, Any]:
    """Which compile mode a model gets from INLINE_COMPILE and its folder's inline.json."""
    import tempfile

    import torch
    from inline_primitives.runtime import compile_mode

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "model.safetensors"
        file.write_bytes(b"")
        os.environ.pop("INLINE_COMPILE", None)
        out["default"] = [compile_mode(cpu, file), compile_mode(cuda, file)]
        (Path(tmp) / "inline.json").write_text('{"compile": true}')
        out["sidecar"] = [compile_mode(cpu, file), compile_mode(cuda, file)]
        (Path(tmp) / "inline.json").unlink()
        os.environ["INLINE_COMPILE"] = "1"
        out["env"] = [compile_mode(cpu, file), compile_mode(cuda, file)]
        os.environ["INLINE_COMPILE"] = "fused"
        out["forced"] = [compile_mode(cpu, file), compile_mode(cuda, file)]
        os.environ.pop("INLINE_COMPILE")
    return out


def mode_group(root: Path, models: dict[str, Any]) -> dict[str, Any]:
    from inline_primitives.runtime import LocalDenoiser, ParallelDenoiser
    from inline_sdk import Cancelled, WorkerStats

    file = str(root / "comfy/diffusion_models/tiny_z_image_turbo.safetensors")
    stats = WorkerStats()
    den = ParallelDenoiser(file, "ulysses=2", ["cpu", "cpu"], stats)
    out: dict[str, Any] = {}
    steps: list[int] = []
    req = requests(models, 1)[0]
    req.on_step = lambda s, n, x: steps.append(s)
    got = den.denoise(req)
    single = LocalDenoiser(models["diffusion"]).denoise(requests(models, 1)[0])
    out["diff"] = float((got - single).abs().max())
    out["steps"] = steps
    out["stats"] = stats.snapshot()["parallel"]
    first_pid = den.group().proc.pid
    # cancel at step 2: the call stops, the group stays (the ranks run ahead of the steps the
    # worker has read, so the call is long enough that the cancel surely lands before its end)
    stop = threading.Event()
    req = requests(models, 1, steps=2000)[0]
    req.on_step = lambda s, n, x: stop.set() if s == 2 else None
    req.cancelled = stop.is_set
    try:
        den.denoise(req)
        out["cancel"] = "finished"
    except Cancelled:
        out["cancel"] = "Cancelled"
    out["same_group_after_cancel"] = den.group().proc.pid == first_pid
    # a rank dies mid-call: that call fails with the reason, the next call gets a fresh group
    # (2,000 steps: the call is surely in flight when the group is killed at its first step)
    req = requests(models, 1, steps=2000)[0]

    def crash(s: int, n: int, x: Any) -> None:
        if s == 1:  # rank 1 dies (torchrun runs each rank in a session of its own)
            os.kill(den._group.info["pids"][1], signal.SIGKILL)  # type: ignore[union-attr]

    req.on_step = crash
    try:
        den.denoise(req)
        out["crash"] = "finished"
    except Exception as exc:
        out["crash"] = f"{type(exc).__name__}: {exc}"
    again = den.denoise(requests(models, 1)[0])
    out["after_crash_diff"] = float((again - single).abs().max())
    out["restarts"] = den.restarts
    group = den._group
    den.close()
    out["shutdown_exit"] = None if group is None else group.proc.returncode
    # the pack worker goes away without a word: rank 0 sees its connection end, the group exits
    orphan = den.group()
    orphan.conn.close()
    out["orphan_exit"] = orphan.proc.wait(120)
    return out


def main() -> None:
    root, mode = Path(sys.argv[1]), sys.argv[2]
    import torch

    torch.manual_seed(0)
    ctx = probe_context()
    models = load(root, ctx)
    runs = {
        "batch": lambda: mode_batch(models),
        "cancel": lambda: mode_cancel(models),
        "fallback": lambda: mode_fallback(models),
        "compile": lambda: mode_compile(models),
        "group": lambda: mode_group(root, models),
        "modes": lambda: mode_modes(root),
    }
    result = {m: runs[m]() for m in mode.split(",")}
    print(json.dumps(result))


if __name__ == "__main__":
    sys.exit(main())
