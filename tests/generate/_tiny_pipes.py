"""Builds tiny random-weight diffusers pipelines of two families and diffusers' own renders.

Run with a pack venv's interpreter: ``python _tiny_pipes.py OUT``. Writes
``OUT/diffusers/tiny-sd`` (StableDiffusionPipeline: UNet2DConditionModel, CLIP text encoder),
``OUT/diffusers/tiny-pixart`` (PixArtAlphaPipeline: PixArtTransformer2DModel, T5 encoder), each
with a locally trained BPE tokenizer, and ``OUT/reference/<case>.png`` rendered by a plain
``from_pretrained(..., local_files_only=True)`` pipeline call, with ``OUT/cases.json``.
"""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TORCHAO_FORCE_SKIP_LOADING_SO_FILES", "1")
import torch

SEED = 1234
CORPUS = [
    "a red fox in the snow", "a lighthouse at dusk", "an astronaut riding a horse",
    "a bowl of fruit on a table", "mountains under a starry sky", "a cat wearing a hat",
] * 8  # fmt: skip
CASES = [
    {"name": "sd", "model": "tiny-sd", "prompt": "a red fox in the snow", "negative": "blurry",
     "width": 96, "height": 64, "steps": 3, "guidance": 5.0, "seed": 7},
    {"name": "pixart", "model": "tiny-pixart", "prompt": "a lighthouse at dusk", "negative": "",
     "width": 64, "height": 64, "steps": 2, "guidance": 4.5, "seed": 11},
    {"name": "sd-img2img", "model": "tiny-sd", "prompt": "a cat wearing a hat", "negative": "",
     "width": 64, "height": 64, "steps": 4, "guidance": 3.0, "seed": 5, "strength": 0.5},
]  # fmt: skip


def build_tokenizer(folder: Path, max_length: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<pad>", "<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", bos_token="<s>",
        eos_token="</s>", model_max_length=max_length,
    )  # fmt: skip
    fast.save_pretrained(str(folder))
    return fast


def randomize(module: torch.nn.Module, scale: float) -> None:
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=g) * scale
            p.copy_(1.0 + noise if "norm" in name and name.endswith("weight") else noise)


def tiny_vae(latent_channels: int = 4):
    from diffusers import AutoencoderKL

    return AutoencoderKL(
        in_channels=3, out_channels=3, latent_channels=latent_channels,
        down_block_types=["DownEncoderBlock2D"] * 4, up_block_types=["UpDecoderBlock2D"] * 4,
        block_out_channels=[8, 8, 8, 8], layers_per_block=1, norm_num_groups=4, sample_size=64,
    ).eval()  # fmt: skip


def build_sd(out: Path):
    from diffusers import EulerDiscreteScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    tokenizer = build_tokenizer(out / "_tok_sd", 77)
    unet = UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, layers_per_block=1,
        block_out_channels=(16, 32), down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=32,
        attention_head_dim=4, norm_num_groups=8,
    ).eval()  # fmt: skip
    text_encoder = CLIPTextModel(
        CLIPTextConfig(
            vocab_size=len(tokenizer), hidden_size=32, intermediate_size=37,
            num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=77,
            projection_dim=32, pad_token_id=0, bos_token_id=2, eos_token_id=3,
        )
    ).eval()  # fmt: skip
    for m, s in ((unet, 0.1), (text_encoder, 0.2)):
        randomize(m, s)
    vae = tiny_vae()
    randomize(vae, 0.1)
    scheduler = EulerDiscreteScheduler(
        beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", num_train_timesteps=1000
    )
    pipe = StableDiffusionPipeline(
        vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=unet, scheduler=scheduler,
        safety_checker=None, feature_extractor=None, requires_safety_checker=False,
    )  # fmt: skip
    pipe.save_pretrained(str(out / "diffusers" / "tiny-sd"))


def build_pixart(out: Path):
    from diffusers import DPMSolverMultistepScheduler, PixArtAlphaPipeline, PixArtTransformer2DModel
    from transformers import T5Config, T5EncoderModel

    tokenizer = build_tokenizer(out / "_tok_pixart", 120)
    transformer = PixArtTransformer2DModel(
        sample_size=32, num_layers=2, patch_size=2, attention_head_dim=8, num_attention_heads=2,
        caption_channels=32, in_channels=4, cross_attention_dim=16, out_channels=8,
        attention_bias=True, activation_fn="gelu-approximate", num_embeds_ada_norm=1000,
        norm_type="ada_norm_single", norm_elementwise_affine=False, norm_eps=1e-6,
    ).eval()  # fmt: skip
    text_encoder = T5EncoderModel(
        T5Config(
            vocab_size=len(tokenizer), d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
            relative_attention_num_buckets=8, pad_token_id=0, eos_token_id=3,
        )
    ).eval()  # fmt: skip
    for m, s in ((transformer, 0.1), (text_encoder, 0.2)):
        randomize(m, s)
    vae = tiny_vae()
    randomize(vae, 0.1)
    pipe = PixArtAlphaPipeline(
        tokenizer=tokenizer,
        text_encoder=text_encoder,
        vae=vae,
        transformer=transformer,
        scheduler=DPMSolverMultistepScheduler(),
    )
    pipe.save_pretrained(str(out / "diffusers" / "tiny-pixart"))


def init_image() -> bytes:
    from PIL import Image

    img = Image.new("RGB", (64, 64), (200, 40, 40))
    for x in range(64):
        for y in range(32, 64):
            img.putpixel((x, y), (x * 4, 255 - x * 4, 90))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def main(out: Path) -> None:
    from diffusers import AutoPipelineForImage2Image, DiffusionPipeline
    from PIL import Image

    torch.manual_seed(SEED)
    build_sd(out)
    build_pixart(out)
    ref = out / "reference"
    ref.mkdir(exist_ok=True)
    (out / "init.png").write_bytes(init_image())
    for case in CASES:
        folder = str(out / "diffusers" / case["model"])
        kwargs = {
            "prompt": case["prompt"],
            "num_inference_steps": case["steps"], "guidance_scale": case["guidance"],
            "generator": torch.Generator("cpu").manual_seed(case["seed"]),
        }  # fmt: skip
        if case["negative"]:  # else the pipeline's own default
            kwargs["negative_prompt"] = case["negative"]
        if "strength" in case:
            pipe = AutoPipelineForImage2Image.from_pretrained(folder, local_files_only=True)
            kwargs["image"] = Image.open(out / "init.png").convert("RGB")
            kwargs["strength"] = case["strength"]
        else:
            pipe = DiffusionPipeline.from_pretrained(folder, local_files_only=True)
            kwargs.update(width=case["width"], height=case["height"])
        pipe.set_progress_bar_config(disable=True)
        pipe(**kwargs).images[0].save(ref / f"{case['name']}.png")
    (out / "cases.json").write_text(json.dumps(CASES, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
