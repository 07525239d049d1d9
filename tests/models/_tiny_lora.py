"""Builds tiny LoRAs for the tiny Z-Image, and the base merged with one by hand (run with a pack
venv's python): ``_tiny_lora.py BASE.safetensors OUT_DIR``."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

RANK = 4


def main(base_file: Path, out: Path) -> None:
    torch.manual_seed(99)
    base = load_file(str(base_file))
    dim = base["layers.0.attention.out.weight"].shape[0]
    # kohya layout on the base file's own (original, fused-qkv) names, with alpha
    kohya: dict[str, torch.Tensor] = {}
    merged = {k: v.clone() for k, v in base.items()}
    for name in ("layers.0.attention.qkv", "layers.1.attention.out", "layers.0.feed_forward.w1"):
        weight = base[f"{name}.weight"]
        down = torch.randn(RANK, weight.shape[1]) * 0.3
        up = torch.randn(weight.shape[0], RANK) * 0.3
        alpha = torch.tensor(2.0)
        key = "lora_unet_" + name.replace(".", "_")
        kohya.update(
            {f"{key}.lora_down.weight": down, f"{key}.lora_up.weight": up, f"{key}.alpha": alpha}
        )
        merged[f"{name}.weight"] = (weight.float() + up @ down * (alpha.item() / RANK)).to(
            weight.dtype
        )
    save_file(kohya, str(out / "loras" / "tiny_kohya.safetensors"))
    save_file(merged, str(out / "diffusion_models" / "tiny_merged_by_hand.safetensors"))
    # diffusers / peft layout on the module's (diffusers) names, no alpha
    peft = {
        "transformer.layers.1.attention.to_q.lora_A.weight": torch.randn(RANK, dim) * 0.3,
        "transformer.layers.1.attention.to_q.lora_B.weight": torch.randn(dim, RANK) * 0.3,
    }
    save_file(peft, str(out / "loras" / "tiny_peft.safetensors"))
    save_file(
        {"foo.weight": torch.zeros(2, 2), "bar.bias": torch.zeros(2)},
        str(out / "loras" / "not_a_lora.safetensors"),
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
