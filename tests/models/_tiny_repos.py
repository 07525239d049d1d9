"""Run in a pack venv: build a tiny causal LM repo and a tiny diffusers pipeline repo (random
weights), laid out as on the Hub (with the docs, pictures and extra formats an import skips).
Prints the true parameter counts as JSON. argv: output folder."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch


def build_llm(root: Path) -> int:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(
        # a 32k vocabulary makes the weight file ~25 MB: more than one 10 MB download chunk,
        # so an interrupted transfer has something to resume from
        vocab_size=32768, hidden_size=96, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=256,
        tie_word_embeddings=False,
    )  # fmt: skip
    model = Qwen3ForCausalLM(config)
    model.save_pretrained(root, safe_serialization=True)
    (root / "README.md").write_text("# tiny llm\n")
    (root / ".gitattributes").write_text("*.safetensors filter=lfs\n")
    (root / "pytorch_model.bin").write_bytes(b"not needed when safetensors exist")
    (root / "assets").mkdir()
    (root / "assets" / "example.png").write_bytes(b"\x89PNG not a model")
    (root / "original").mkdir()
    (root / "original" / "consolidated.safetensors").write_bytes(b"skipped")
    return sum(p.numel() for p in model.parameters())


def build_pipeline(root: Path) -> int:
    from diffusers import DDPMPipeline, DDPMScheduler, UNet2DModel

    torch.manual_seed(0)
    unet = UNet2DModel(
        sample_size=8, in_channels=3, out_channels=3, layers_per_block=1,
        block_out_channels=(8, 16), norm_num_groups=4,
        down_block_types=("DownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "UpBlock2D"),
    )  # fmt: skip
    pipe = DDPMPipeline(unet=unet, scheduler=DDPMScheduler(num_train_timesteps=10))
    pipe.save_pretrained(root, safe_serialization=True)
    (root / "README.md").write_text("# tiny pipeline\n")
    (root / "tiny-pipe-single-file.safetensors").write_bytes(
        (root / "unet" / "diffusion_pytorch_model.safetensors").read_bytes()
    )
    (root / "sample.jpg").write_bytes(b"jpeg")
    return sum(p.numel() for p in unet.parameters())


def main() -> None:
    out = Path(sys.argv[1])
    counts = {
        "llm": build_llm(out / "tiny-llm"),
        "diffusers": build_pipeline(out / "tiny-pipe"),
    }
    print(json.dumps(counts))


if __name__ == "__main__":
    main()
