"""A tiny Z-Image with random weights, built locally (no download): what ``inline demo models``
writes for ``alibaba/z-image-turbo`` and the primitive graph, and what the model tests run on.
Run in the zimage pack's venv (torch, diffusers, transformers).

``build_parts`` makes the three models (shapes after ``TINY_MODELS.md`` and the shipped
configs: the rope axes are the real ones scaled to the tiny head width, so the primitives' shape
detection reads them as Z-Image); ``save_comfy`` writes them in the ComfyUI single-file layout
(original transformer keys with fused qkv, LDM VAE keys, ``model.``-prefixed Qwen3 keys), each
checked against diffusers' own converters; ``save_lora`` a kohya LoRA on the transformer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

SEED = 1234
CORPUS = [
    "a red fox in snow", "a lighthouse at dusk", "a cat on a mat", "blurry", "a photo of a dog",
    "the quick brown fox jumps over the lazy dog", "sunrise over the sea, 35mm film",
    "a bowl of fruit on a wooden table", "user assistant system think",
]  # fmt: skip
CHAT_TEMPLATE = (
    "{%- for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{ '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}"
)


def build_tokenizer(folder: Path):  # type: ignore[no-untyped-def]
    """A byte-level BPE tokenizer with Qwen3's specials, trained here, saved in ``folder``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=384,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS * 4, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        padding_side="right",
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(folder))
    return fast


def randomize(module: torch.nn.Module, scale: float) -> None:
    """Seeded noise of ``scale`` on every weight (norm weights around 1)."""
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=g) * scale
            if "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + noise)
            else:
                p.copy_(noise)


def to_original_transformer(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A diffusers Z-Image transformer's state dict in the original (ComfyUI) keys."""
    out: dict[str, torch.Tensor] = {}
    for key, value in sd.items():
        if ".attention.to_k." in key or ".attention.to_v." in key:
            continue
        new = key.replace("all_x_embedder.2-1.", "x_embedder.")
        new = new.replace("all_final_layer.2-1.", "final_layer.")
        new = new.replace(".attention.to_out.0.", ".attention.out.")
        new = new.replace(".attention.norm_q.", ".attention.q_norm.")
        new = new.replace(".attention.norm_k.", ".attention.k_norm.")
        if ".attention.to_q.weight" in key:
            k = key.replace("to_q", "to_k")
            v = key.replace("to_q", "to_v")
            new = new.replace(".attention.to_q.weight", ".attention.qkv.weight")
            value = torch.cat([value, sd[k], sd[v]], dim=0)
        out[new] = value.contiguous()
    return out


def to_ldm_vae(sd: dict[str, torch.Tensor], levels: int) -> dict[str, torch.Tensor]:
    """A diffusers VAE's state dict in the LDM (ComfyUI single-file) keys."""
    from diffusers.loaders.single_file_utils import DIFFUSERS_TO_LDM_MAPPING

    top = DIFFUSERS_TO_LDM_MAPPING["vae"]
    out: dict[str, torch.Tensor] = {}
    for key, value in sd.items():
        if key in top:
            out[top[key]] = value
            continue
        new = key
        for side in ("encoder", "decoder"):
            for i in range(levels):
                new = new.replace(f"encoder.down_blocks.{i}.resnets.", f"encoder.down.{i}.block.")
                new = new.replace(
                    f"encoder.down_blocks.{i}.downsamplers.0.", f"encoder.down.{i}.downsample."
                )
                j = levels - 1 - i
                new = new.replace(f"decoder.up_blocks.{i}.resnets.", f"decoder.up.{j}.block.")
                new = new.replace(
                    f"decoder.up_blocks.{i}.upsamplers.0.", f"decoder.up.{j}.upsample."
                )
            for k in range(2):
                new = new.replace(f"{side}.mid_block.resnets.{k}.", f"{side}.mid.block_{k + 1}.")
        new = new.replace("conv_shortcut", "nin_shortcut")
        if ".mid_block.attentions.0." in new:
            new = new.replace(".mid_block.attentions.0.", ".mid.attn_1.")
            new = new.replace("group_norm.", "norm.").replace("to_out.0.", "proj_out.")
            new = new.replace("to_q.", "q.").replace("to_k.", "k.").replace("to_v.", "v.")
            if value.ndim == 2:
                value = value[:, :, None, None]
        out[new] = value.contiguous()
    return out


@dataclass(frozen=True)
class ComfyNames:
    """The file names ``save_comfy`` writes (the tokenizer folder is found beside the text
    encoder as ``<stem>_tokenizer``, or as ``qwen_3_4b_tokenizer``)."""

    transformer: str = "tiny_z_image_turbo.safetensors"
    vae: str = "tiny_ae.safetensors"
    text_encoder: str = "tiny_qwen3.safetensors"
    tokenizer: str = "qwen_3_4b_tokenizer"


def build_parts(tokenizer: Any) -> tuple[Any, Any, Any]:
    """The tiny text encoder (``Qwen3Model``), transformer and VAE, random (seeded)."""
    from diffusers import AutoencoderKL, ZImageTransformer2DModel
    from transformers import Qwen3Config, Qwen3Model

    te_cfg = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=40960,
        rms_norm_eps=1e-6, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
    )  # fmt: skip
    text_encoder = Qwen3Model(te_cfg).eval()
    randomize(text_encoder, 0.2)
    transformer = ZImageTransformer2DModel(
        all_patch_size=(2,), all_f_patch_size=(1,), in_channels=16, dim=64, n_layers=2,
        n_refiner_layers=1, n_heads=2, n_kv_heads=2, norm_eps=1e-5, qk_norm=True,
        cap_feat_dim=32, rope_theta=256.0, t_scale=1000.0, axes_dims=[8, 12, 12],
        axes_lens=[1536, 512, 512],
    ).eval()  # fmt: skip
    randomize(transformer, 0.1)
    vae = AutoencoderKL(
        in_channels=3, out_channels=3, latent_channels=16,
        down_block_types=["DownEncoderBlock2D"] * 4, up_block_types=["UpDecoderBlock2D"] * 4,
        block_out_channels=[32, 32, 32, 32], layers_per_block=1, norm_num_groups=32,
        scaling_factor=0.3611, shift_factor=0.1159, use_quant_conv=False,
        use_post_quant_conv=False, sample_size=1024, force_upcast=True,
    ).eval()  # fmt: skip
    return text_encoder, transformer, vae


def save_comfy(
    comfy: Path, text_encoder: Any, transformer: Any, vae: Any, names: ComfyNames
) -> dict[str, torch.Tensor]:
    """The three models under ``comfy/`` in the ComfyUI layout (``diffusion_models/``,
    ``vae/``, ``text_encoders/``); the transformer's original-key state dict."""
    from diffusers.loaders.single_file_utils import (
        convert_ldm_vae_checkpoint,
        convert_z_image_transformer_checkpoint_to_diffusers,
    )
    from safetensors.torch import save_file

    for sub in ("diffusion_models", "vae", "text_encoders"):
        (comfy / sub).mkdir(parents=True, exist_ok=True)
    t_sd = {k: v.detach().clone() for k, v in transformer.state_dict().items()}
    original = to_original_transformer(t_sd)
    back = convert_z_image_transformer_checkpoint_to_diffusers(dict(original))
    assert set(back) == set(t_sd), set(back) ^ set(t_sd)
    assert all(torch.equal(back[k], t_sd[k]) for k in t_sd)
    save_file(original, str(comfy / "diffusion_models" / names.transformer))

    v_sd = {k: v.detach().clone() for k, v in vae.state_dict().items()}
    ldm = to_ldm_vae(v_sd, 4)
    back = convert_ldm_vae_checkpoint(dict(ldm), dict(vae.config))
    assert set(back) == set(v_sd), set(back) ^ set(v_sd)
    assert all(torch.equal(back[k], v_sd[k]) for k in v_sd)
    save_file(ldm, str(comfy / "vae" / names.vae))

    te_sd = {
        f"model.{k}": v.detach().clone().contiguous() for k, v in text_encoder.state_dict().items()
    }
    save_file(te_sd, str(comfy / "text_encoders" / names.text_encoder))
    return original


def save_lora(base: dict[str, torch.Tensor], path: Path, rank: int = 4, seed: int = 99) -> None:
    """A kohya-layout LoRA (with alpha) on three of ``base``'s (original-key) layers."""
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(seed)
    kohya: dict[str, torch.Tensor] = {}
    for name in ("layers.0.attention.qkv", "layers.1.attention.out", "layers.0.feed_forward.w1"):
        weight = base[f"{name}.weight"]
        key = "lora_unet_" + name.replace(".", "_")
        kohya[f"{key}.lora_down.weight"] = torch.randn(rank, weight.shape[1], generator=g) * 0.3
        kohya[f"{key}.lora_up.weight"] = torch.randn(weight.shape[0], rank, generator=g) * 0.3
        kohya[f"{key}.alpha"] = torch.tensor(2.0)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(kohya, str(path))


#: The demo's files (``inline demo models``): the text encoder's tokenizer is found beside it.
DEMO_NAMES = ComfyNames(
    transformer="demo_z_image_turbo.safetensors",
    vae="demo_ae.safetensors",
    text_encoder="demo_qwen3.safetensors",
    tokenizer="demo_qwen3_tokenizer",
)
DEMO_LORA = "demo_lora.safetensors"


def build_demo(out: Path) -> None:
    """The demo Z-Image under ``out`` (models-dir layout): the three models, the tokenizer and
    a LoRA (``loras/demo_lora.safetensors``)."""
    torch.manual_seed(SEED)
    tokenizer = build_tokenizer(out / "text_encoders" / DEMO_NAMES.tokenizer)
    text_encoder, transformer, vae = build_parts(tokenizer)
    original = save_comfy(out, text_encoder, transformer, vae, DEMO_NAMES)
    save_lora(original, out / "loras" / DEMO_LORA)


if __name__ == "__main__":
    import sys

    build_demo(Path(sys.argv[1]))
    print("built zimage", flush=True)
