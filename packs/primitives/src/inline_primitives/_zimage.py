"""The Z-Image family: Tongyi-MAI's Z-Image (Turbo) transformer, the FLUX.1 VAE, Qwen3 text encoder.

Key layouts accepted: the original / ComfyUI single files (``x_embedder``, fused ``qkv``; LDM VAE
keys; Qwen3 ``model.``-prefixed keys) and diffusers / transformers folders. Architecture comes from
tensor shapes; the shipped configs (``configs/z-image/``) give only what shapes cannot tell: rope
axes, lengths and theta, timestep scale, norm epsilons, VAE scaling, shift and group-norm groups.
"""

from __future__ import annotations

import re
from typing import Any

from ._families import Component, Family, Keys, register

#: The folder next to a single-file text encoder where the Qwen3 tokenizer is looked for.
TOKENIZER_FOLDER = "qwen_3_4b_tokenizer"


def count_blocks(keys: Keys, prefix: str) -> int:
    """How many numbered blocks ``prefix<N>.`` there are (highest index + 1)."""
    pattern = re.compile(re.escape(prefix) + r"(\d+)\.")
    found = [int(m.group(1)) for k in keys if (m := pattern.match(k))]
    return max(found) + 1 if found else 0


def _clean(base: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in base.items() if not k.startswith("_")}


def scale_axes(axes: list[int], head_dim: int) -> list[int]:
    """Rope axes for ``head_dim``: the shipped ones when they fit, else the same proportions
    (even numbers, the remainder on the first axis), so a reduced model keeps the family's rope."""
    if sum(axes) == head_dim:
        return list(axes)
    total = sum(axes)
    scaled = [max(2, round(a * head_dim / total / 2) * 2) for a in axes]
    scaled[0] += head_dim - sum(scaled)
    return scaled


# the transformer ---------------------------------------------------------------------------------
def _match_transformer(keys: Keys) -> str | None:
    if "cap_embedder.1.weight" not in keys or "x_pad_token" not in keys:
        return None
    if "x_embedder.weight" in keys or any(".attention.qkv.weight" in k for k in keys):
        return "original"
    if any(k.startswith("all_x_embedder.") for k in keys):
        return "diffusers"
    return None


def _infer_transformer(keys: Keys, layout: str, base: dict[str, Any]) -> dict[str, Any]:
    cfg = _clean(base)
    dim, cap_feat_dim = keys["cap_embedder.1.weight"].shape
    norm_q = "layers.0.attention." + ("q_norm.weight" if layout == "original" else "norm_q.weight")
    qk_norm = norm_q in keys
    head_dim = keys[norm_q].shape[0] if qk_norm else dim // int(base.get("n_heads", 30))
    n_heads = dim // head_dim
    if layout == "original":
        rows = keys["layers.0.attention.qkv.weight"].shape[0]
        n_kv_heads = (rows // head_dim - n_heads) // 2
        sizes = zip(base["all_patch_size"], base["all_f_patch_size"], strict=True)
        patches = [(int(p), int(f)) for p, f in sizes]
        embed_in = keys["x_embedder.weight"].shape[1]
    else:
        n_kv_heads = keys["layers.0.attention.to_k.weight"].shape[0] // head_dim
        found = sorted(
            {tuple(int(x) for x in m.groups()) for k in keys
             if (m := re.match(r"all_x_embedder\.(\d+)-(\d+)\.weight$", k))}
        )  # fmt: skip
        patches = [(p, f) for p, f in found]
        p0, f0 = patches[0]
        embed_in = keys[f"all_x_embedder.{p0}-{f0}.weight"].shape[1]
    p0, f0 = patches[0]
    cfg.update(
        all_patch_size=[p for p, _ in patches],
        all_f_patch_size=[f for _, f in patches],
        in_channels=embed_in // (p0 * p0 * f0),
        dim=dim,
        n_layers=count_blocks(keys, "layers."),
        n_refiner_layers=count_blocks(keys, "noise_refiner."),
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        qk_norm=qk_norm,
        cap_feat_dim=cap_feat_dim,
        axes_dims=scale_axes(list(base["axes_dims"]), head_dim),
    )
    if "siglip_embedder.1.weight" in keys:
        cfg["siglip_feat_dim"] = keys["siglip_embedder.1.weight"].shape[1]
    return cfg


def _create_transformer(config: dict[str, Any]) -> Any:
    from accelerate import init_empty_weights
    from diffusers import ZImageTransformer2DModel

    with init_empty_weights():
        return ZImageTransformer2DModel.from_config(_clean(config))


def _convert_transformer(sd: dict[str, Any], layout: str, config: dict[str, Any]) -> dict[str, Any]:
    if layout == "original":
        from diffusers.loaders.single_file_utils import (
            convert_z_image_transformer_checkpoint_to_diffusers,
        )

        return convert_z_image_transformer_checkpoint_to_diffusers(sd)
    return sd


# the VAE ----------------------------------------------------------------------------------------
def _match_vae(keys: Keys) -> str | None:
    conv_in = keys.get("decoder.conv_in.weight")
    if conv_in is None or "encoder.conv_in.weight" not in keys or len(conv_in.shape) != 4:
        return None
    if conv_in.shape[1] != 16:  # the FLUX.1 VAE: 16 latent channels
        return None
    if "encoder.down.0.block.0.conv1.weight" in keys:
        return "ldm"
    if "encoder.down_blocks.0.resnets.0.conv1.weight" in keys:
        return "diffusers"
    return None


def _infer_vae(keys: Keys, layout: str, base: dict[str, Any]) -> dict[str, Any]:
    cfg = _clean(base)
    if layout == "ldm":
        levels = count_blocks(keys, "encoder.down.")
        block = "encoder.down.{}.block.0.conv1.weight"
        per_block = count_blocks(keys, "encoder.down.0.block.")
        mid_attn = any(k.startswith("encoder.mid.attn_1.") for k in keys)
    else:
        levels = count_blocks(keys, "encoder.down_blocks.")
        block = "encoder.down_blocks.{}.resnets.0.conv1.weight"
        per_block = count_blocks(keys, "encoder.down_blocks.0.resnets.")
        mid_attn = any(k.startswith("encoder.mid_block.attentions.0.") for k in keys)
    cfg.update(
        in_channels=keys["encoder.conv_in.weight"].shape[1],
        out_channels=keys["decoder.conv_out.weight"].shape[0],
        latent_channels=keys["decoder.conv_in.weight"].shape[1],
        block_out_channels=[keys[block.format(i)].shape[0] for i in range(levels)],
        layers_per_block=per_block,
        down_block_types=["DownEncoderBlock2D"] * levels,
        up_block_types=["UpDecoderBlock2D"] * levels,
        use_quant_conv="quant_conv.weight" in keys,
        use_post_quant_conv="post_quant_conv.weight" in keys,
        mid_block_add_attention=mid_attn,
    )
    return cfg


def _create_vae(config: dict[str, Any]) -> Any:
    from accelerate import init_empty_weights
    from diffusers import AutoencoderKL

    with init_empty_weights():
        return AutoencoderKL.from_config(_clean(config))


def _convert_vae(sd: dict[str, Any], layout: str, config: dict[str, Any]) -> dict[str, Any]:
    if layout == "ldm":
        from diffusers.loaders.single_file_utils import convert_ldm_vae_checkpoint

        return convert_ldm_vae_checkpoint(sd, config)
    return sd


# the text encoder ---------------------------------------------------------------------------------
def _match_text_encoder(keys: Keys) -> str | None:
    if "embed_tokens.weight" in keys and "layers.0.self_attn.q_norm.weight" in keys:
        return "qwen3"
    return None


def _infer_text_encoder(keys: Keys, layout: str, base: dict[str, Any]) -> dict[str, Any]:
    cfg = _clean(base)
    vocab, hidden = keys["embed_tokens.weight"].shape
    head_dim = keys["layers.0.self_attn.q_norm.weight"].shape[0]
    cfg.update(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=keys["layers.0.mlp.gate_proj.weight"].shape[0],
        num_hidden_layers=count_blocks(keys, "layers."),
        head_dim=head_dim,
        num_attention_heads=keys["layers.0.self_attn.q_proj.weight"].shape[0] // head_dim,
        num_key_value_heads=keys["layers.0.self_attn.k_proj.weight"].shape[0] // head_dim,
        attention_bias="layers.0.self_attn.q_proj.bias" in keys,
    )
    cfg.pop("layer_types", None)  # derived from the layer count
    for special in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if isinstance(cfg.get(special), int) and cfg[special] >= vocab:  # a reduced vocabulary
            cfg[special] = None
    return cfg


def _create_text_encoder(config: dict[str, Any]) -> Any:
    from accelerate import init_empty_weights
    from transformers import Qwen3Config, Qwen3Model

    cfg = Qwen3Config.from_dict(_clean(config))
    with init_empty_weights():
        return Qwen3Model(cfg)


def _convert_text_encoder(
    sd: dict[str, Any], layout: str, config: dict[str, Any]
) -> dict[str, Any]:
    # Qwen3ForCausalLM files carry lm_head (or tie it to the embeddings); the encoder has none.
    return {k: v for k, v in sd.items() if not k.startswith("lm_head.")}


ZIMAGE = register(
    Family(
        name="z-image",
        label="Z-Image Turbo",
        components=(
            Component(
                family="z-image",
                kind="diffusion",
                label="Z-Image Turbo transformer",
                config_file="transformer.json",
                prefixes=("model.diffusion_model.",),
                match=_match_transformer,
                infer=_infer_transformer,
                create=_create_transformer,
                convert=_convert_transformer,
            ),
            Component(
                family="z-image",
                kind="vae",
                label="Z-Image VAE (FLUX.1 autoencoder)",
                config_file="vae.json",
                prefixes=("first_stage_model.", "vae."),
                match=_match_vae,
                infer=_infer_vae,
                create=_create_vae,
                convert=_convert_vae,
            ),
            Component(
                family="z-image",
                kind="text_encoder",
                label="Z-Image text encoder (Qwen3)",
                config_file="text_encoder.json",
                prefixes=("model.",),
                match=_match_text_encoder,
                infer=_infer_text_encoder,
                create=_create_text_encoder,
                convert=_convert_text_encoder,
            ),
        ),
    )
)
