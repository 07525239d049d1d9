"""In the primitives pack venv: hostile LoRA files against a tiny module, through the real
``use_loras``. Each case is applied twice, once onto the bare module and once over a good stack
already merged; each must be refused as a ``ModelFileError`` naming the file and leave every
weight as it was before the call, and removing the LoRAs afterwards must give the base back.
``_lora_probe.py WORK_DIR``; prints JSON: one record per case and start."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from inline_primitives import LoraItem, LoraStack, ModelFileError, _families, use_loras
from inline_primitives._header import TensorInfo
from safetensors.torch import save_file

RANK = 2
Tensors = dict[str, torch.Tensor]


class Tiny(torch.nn.Module):
    """Four linear layers; ``q`` and ``k`` are what the base file keeps fused as ``qkv``."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 6)
        self.b = torch.nn.Linear(6, 4).to(torch.bfloat16)
        self.q = torch.nn.Linear(8, 6)
        self.k = torch.nn.Linear(8, 6)


def split_qkv(sd: Tensors, layout: str, config: dict[str, Any]) -> Tensors:
    """The family converter's part: the base file's fused ``qkv`` as the module's q and k."""
    out = dict(sd)
    if "qkv.weight" in out:
        out["q.weight"], out["k.weight"] = out.pop("qkv.weight").chunk(2)
    return out


@dataclass(frozen=True)
class Component:
    convert: Callable[[Tensors, str, dict[str, Any]], Tensors] = split_qkv


@dataclass(frozen=True)
class Detection:
    """What ``detect`` gives for the base file: the original keys the converter reads."""

    component: Component = field(default_factory=Component)
    keys: dict[str, TensorInfo] = field(
        default_factory=lambda: {"qkv.weight": TensorInfo("F32", (12, 8), Path("base"))}
    )
    layout: str = "tiny"
    config: dict[str, Any] = field(default_factory=dict)


def pair(out: int, inp: int, alpha: float | None = 1.0) -> Tensors:
    """A kohya down/up (and alpha) for a weight ``out x inp``, keys without their target."""
    roles = {
        "lora_down.weight": torch.randn(RANK, inp) * 0.3,
        "lora_up.weight": torch.randn(out, RANK) * 0.3,
    }
    if alpha is not None:
        roles["alpha"] = torch.tensor(alpha)
    return roles


def lora(**targets: Tensors) -> Tensors:
    return {f"lora_unet_{t}.{role}": v for t, roles in targets.items() for role, v in roles.items()}


def poisoned(roles: Tensors, role: str, value: float) -> Tensors:
    bad = {k: v.clone() for k, v in roles.items()}
    bad[role].view(-1)[1 if bad[role].numel() > 1 else 0] = value
    return bad


def cases() -> dict[str, Tensors]:
    """Each hostile LoRA: a first target that is fine, then the broken one."""
    a = pair(6, 8)
    return {
        "nan_down": lora(a=a, b=poisoned(pair(4, 6), "lora_down.weight", float("nan"))),
        "inf_up": lora(a=a, b=poisoned(pair(4, 6), "lora_up.weight", float("inf"))),
        "nan_alpha": lora(a=a, b=poisoned(pair(4, 6), "alpha", float("nan"))),
        "nan_original": lora(a=a, qkv=poisoned(pair(12, 8), "lora_up.weight", float("-inf"))),
        "rank_mismatch": lora(a=a, b={**pair(4, 6), "lora_up.weight": torch.randn(4, 3)}),
        "flat_down": lora(a=a, b={**pair(4, 6), "lora_down.weight": torch.randn(6)}),
        "wrong_shape": lora(a=a, b=pair(5, 6)),
        "wrong_original_shape": lora(a=a, qkv=pair(10, 8)),
        "alpha_not_scalar": lora(a=a, b={**pair(4, 6), "alpha": torch.ones(2)}),
        "int_tensors": lora(a=a, b={**pair(4, 6), "lora_up.weight": torch.ones(4, RANK).int()}),
        "overflow": lora(
            a=a,
            b={
                "lora_down.weight": torch.full((RANK, 6), 4.0),
                "lora_up.weight": torch.full((4, RANK), 3e38),
            },
        ),
    }


def write(path: Path, tensors: Tensors) -> Path:
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path))
    return path


def snapshot(module: torch.nn.Module) -> Tensors:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def same(module: torch.nn.Module, weights: Tensors) -> bool:
    return all(torch.equal(weights[k], v) for k, v in module.state_dict().items())


def stack(*files: Path) -> LoraStack:
    return LoraStack(loras=[LoraItem(file=str(f), strength=1.0, layout="kohya") for f in files])


def attempt(module: torch.nn.Module, value: LoraStack) -> dict[str, Any]:
    try:
        use_loras(module, "base.safetensors", value)
    except Exception as exc:
        return {"type": type(exc).__name__, "file_error": isinstance(exc, ModelFileError),
                "message": str(exc)}  # fmt: skip
    return {"type": None, "file_error": False, "message": ""}


def main(work: Path) -> None:
    torch.manual_seed(3)
    _families.detect = lambda *args: Detection()  # type: ignore[assignment]  # use_loras's
    good = write(work / "good.safetensors", lora(a=pair(6, 8), qkv=pair(12, 8)))
    files = {name: write(work / f"{name}.safetensors", t) for name, t in cases().items()}
    truncated = work / "truncated.safetensors"
    truncated.write_bytes(good.read_bytes()[:-40])
    files["truncated"] = truncated
    header = work / "bad_header.safetensors"
    header.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    files["bad_header"] = header
    module = Tiny()
    base = snapshot(module)
    records = []
    for name, path in files.items():
        for start in ("base", "stacked"):
            use_loras(module, "base.safetensors", stack(good) if start == "stacked" else None)
            before = snapshot(module)
            record = attempt(module, stack(good, path))
            record.update(case=name, start=start, file=str(path), unchanged=same(module, before))
            use_loras(module, "base.safetensors", None)  # the next render, without the LoRA
            record["base_after"] = same(module, base)
            records.append(record)
    # a refused stack does not stick: the good one still applies, and goes, exactly
    use_loras(module, "base.safetensors", stack(good))
    applied = not same(module, base)
    use_loras(module, "base.safetensors", None)
    print(
        json.dumps(
            {"records": records, "good_applies": applied, "good_removed": same(module, base)}
        )
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
