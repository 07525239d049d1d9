"""The sequence split on a real 2-rank gloo group, through the runtime library (run in a pack
venv): ``python _split_probe.py TINY_ROOT WORK_DIR``, prints JSON.

Each case runs the same request through ``ParallelDenoiser`` (``ulysses=2`` on two CPU ranks)
and through the single-process ``LocalDenoiser``: the largest latent and pixel differences, and
what each rank's attention saw (recorded inside the rank, per stage: [tokens it saw, tokens of
the whole sequence]). Then a LoRA stack on the group, a call without it after, the plans that
are refused and the uneven-heads plan.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from _batch_probe import load, pixel_diff, requests
from _probe_ctx import probe_context

HERE = Path(__file__).resolve().parent


def compare(den: Any, local: Any, models: dict[str, Any], reqs: list, alone: list) -> dict:
    got = den.denoise(reqs[0])
    want = local.denoise(alone[0])
    return {
        "latent_diff": float((got - want).abs().max()),
        "pixel_diff": pixel_diff(models["vae"], got, want),
        "report": den.last,
    }


def attention_choices() -> dict[str, Any]:
    """The SDPA kernel the denoisers pick: the policy's, INLINE_ATTENTION over it, and nothing
    forced on the CPU (CUDA is the only device with a choice)."""
    import os
    import types

    import torch
    from inline_primitives.runtime._attention import attention_kernel, attention_on

    placed = types.SimpleNamespace(_inline_attention="flash")
    os.environ.pop("INLINE_ATTENTION", None)
    out: dict[str, Any] = {"policy": attention_kernel(placed)}
    os.environ["INLINE_ATTENTION"] = "math"
    out["forced"] = attention_kernel(placed)
    os.environ["INLINE_ATTENTION"] = "warp-speed"
    out["unknown"] = attention_kernel(placed)
    os.environ["INLINE_ATTENTION"] = "efficient"
    with attention_on(placed, torch.device("cpu")) as used:
        out["cpu"] = used
    os.environ.pop("INLINE_ATTENTION")
    return out


def main(root: Path, work: Path) -> None:
    import torch
    from inline_primitives import LoraItem, LoraStack, lora_weights
    from inline_primitives.runtime import LocalDenoiser, ParallelDenoiser
    from inline_primitives.runtime._ulysses import SplitRefused, split_plan
    from inline_sdk import WorkerStats

    torch.manual_seed(0)
    models = load(root, probe_context())
    base = root / "comfy/diffusion_models/tiny_z_image_turbo.safetensors"
    stats = WorkerStats()
    den = ParallelDenoiser(str(base), "ulysses=2", ["cpu", "cpu"], stats)
    local = LocalDenoiser(models["diffusion"])
    out: dict[str, Any] = {}
    # without and with classifier-free guidance (two captions of different lengths: a mask)
    for guidance in (0.0, 1.5):
        r = requests(models, 1, guidance=guidance, steps=3)
        a = requests(models, 1, guidance=guidance, steps=3)
        out[f"g{guidance}"] = compare(den, local, models, r, a)
    out["stats"] = stats.snapshot()["parallel"]
    # a LoRA stack reaches every rank
    (work / "loras").mkdir(parents=True, exist_ok=True)
    (work / "diffusion_models").mkdir(exist_ok=True)
    subprocess.run([sys.executable, str(HERE / "_tiny_lora.py"), str(base), str(work)], check=True)
    item = LoraItem(file=str(work / "loras/tiny_kohya.safetensors"), strength=1.0, layout="kohya")
    stack = LoraStack(loras=[item])
    module = models["diffusion"]
    r = requests(models, 1, steps=3)
    a = requests(models, 1, steps=3)
    r[0].loras = lora_weights(module, str(base), stack)
    a[0].loras = lora_weights(module, str(base), stack)
    out["lora"] = compare(den, local, models, r, a)
    # the next call without a LoRA is the base again on every rank
    a = requests(models, 1, steps=3)
    a[0].loras = lora_weights(module, str(base), None)
    out["after_lora"] = compare(den, local, models, requests(models, 1, steps=3), a)
    r = requests(models, 1, steps=3)
    r[0].loras = lora_weights(module, str(base), stack)
    with_lora = den.denoise(r[0])
    plain = den.denoise(requests(models, 1, steps=3)[0])
    out["lora"]["changes_the_image"] = float((with_lora - plain).abs().max())
    den.close()
    try:
        ParallelDenoiser(str(base), "ring=2", ["cpu", "cpu"])
        out["ring"] = "accepted"
    except SplitRefused as exc:
        out["ring"] = str(exc)
    uneven = split_plan("ulysses=4", 30, "cuda")
    out["uneven"] = {"ulysses": uneven.ulysses, "uneven": uneven.uneven}
    try:
        split_plan("ulysses=4,ring=2", 30, "cuda")
        out["uneven_ring"] = "accepted"
    except SplitRefused as exc:
        out["uneven_ring"] = str(exc)
    out["attention"] = attention_choices()
    # a group whose ranks cannot load their model: torchrun ends, and the start fails saying so
    # (it waited for rank 0 until the start timeout before)
    from inline_primitives.runtime._parallel import GroupFailed, WorkerGroup

    try:
        WorkerGroup(str(work / "missing.safetensors"), "ulysses=2", ["cpu", "cpu"]).close()
        out["missing_model"] = "started"
    except GroupFailed as exc:
        out["missing_model"] = str(exc)
    print(json.dumps(out))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
