"""Tiny diffusers pipelines with random weights, built locally (no download): what ``inline
demo models`` writes for ``diffusers/generate`` and what the generate tests run on. Run in the
diffusers pack's venv. ``build_sd``: a ``StableDiffusionPipeline`` (UNet2DConditionModel, CLIP
text encoder; img2img through its family); ``build_pixart``: a ``PixArtAlphaPipeline``
(PixArtTransformer2DModel, T5 encoder); each with a locally trained BPE tokenizer.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

SEED = 1234
CORPUS = [
    "a red fox in the snow", "a lighthouse at dusk", "an astronaut riding a horse",
    "a bowl of fruit on a table", "mountains under a starry sky", "a cat wearing a hat",
] * 8  # fmt: skip


def build_tokenizer(folder: Path, max_length: int):  # type: ignore[no-untyped-def]
    """A byte-level BPE tokenizer trained here, saved in ``folder``."""
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
    """Seeded noise of ``scale`` on every weight (norm weights around 1)."""
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=g) * scale
            p.copy_(1.0 + noise if "norm" in name and name.endswith("weight") else noise)


def tiny_vae(latent_channels: int = 4):  # type: ignore[no-untyped-def]
    """A tiny ``AutoencoderKL`` (four levels of 8 channels)."""
    from diffusers import AutoencoderKL

    return AutoencoderKL(
        in_channels=3, out_channels=3, latent_channels=latent_channels,
        down_block_types=["DownEncoderBlock2D"] * 4, up_block_types=["UpDecoderBlock2D"] * 4,
        block_out_channels=[8, 8, 8, 8], layers_per_block=1, norm_num_groups=4, sample_size=64,
    ).eval()  # fmt: skip


def build_sd(out: Path, name: str = "tiny-sd") -> Path:
    """A tiny ``StableDiffusionPipeline`` (UNet, CLIP text encoder) in
    ``out/diffusers/<name>``; that folder."""
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
    folder = out / "diffusers" / name
    pipe.save_pretrained(str(folder))
    shutil.rmtree(out / "_tok_sd", ignore_errors=True)
    return folder


def build_pixart(out: Path, name: str = "tiny-pixart") -> Path:
    """A tiny ``PixArtAlphaPipeline`` (PixArt transformer, T5 encoder) in
    ``out/diffusers/<name>``; that folder."""
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
    folder = out / "diffusers" / name
    pipe.save_pretrained(str(folder))
    shutil.rmtree(out / "_tok_pixart", ignore_errors=True)
    return folder


DEMO_NAME = "demo-sd"


if __name__ == "__main__":
    import sys

    from ._ldm import single_file

    torch.manual_seed(SEED)
    out = Path(sys.argv[1])
    folder = build_sd(out, DEMO_NAME)
    print(f"built diffusers/{DEMO_NAME}", flush=True)
    # the same weights as one ComfyUI-style checkpoint, loaded with that folder's configs
    single_file(folder, out / "checkpoints" / f"{DEMO_NAME}.safetensors", configs=DEMO_NAME)
    print(f"built checkpoints/{DEMO_NAME}.safetensors", flush=True)
