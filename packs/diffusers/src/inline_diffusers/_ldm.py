"""A Stable Diffusion 1.x pipeline folder written as one original-layout (LDM) checkpoint: the
single file ComfyUI's ``CheckpointLoaderSimple`` loads and ``diffusers/generate`` reads through
its ``checkpoint`` param. ``inline demo models`` and the tests write one from a tiny folder.

The layout is the one diffusers' single-file loader reads back (``convert_ldm_unet_checkpoint``,
``convert_ldm_vae_checkpoint``, ``convert_ldm_clip_checkpoint``): every tensor is renamed, and
the VAE's attention projections become 1x1 convolutions again. Nothing else changes, so the
folder and its file render the same bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

UNET: Final = "model.diffusion_model."
VAE: Final = "first_stage_model."
CLIP: Final = "cond_stage_model.transformer."
#: The safetensors metadata key naming the diffusers folder whose configs load the file.
CONFIGS_KEY: Final = "inline.configs"
#: A UNet resnet's diffusers names -> LDM's.
UNET_RESNET: Final = (
    ("norm1", "in_layers.0"),
    ("conv1", "in_layers.2"),
    ("norm2", "out_layers.0"),
    ("conv2", "out_layers.3"),
    ("time_emb_proj", "emb_layers.1"),
    ("conv_shortcut", "skip_connection"),
)
#: The VAE mid-block attention's diffusers names -> LDM's.
VAE_ATTENTION: Final = (
    ("group_norm", "norm"),
    ("to_q", "q"),
    ("to_k", "k"),
    ("to_v", "v"),
    ("to_out.0", "proj_out"),
)


def _rename(rest: str, pairs: tuple[tuple[str, str], ...]) -> str:
    """``rest`` with its leading module name (``norm1``, ``to_out.0``) renamed by ``pairs``."""
    for old, new in pairs:
        if rest.startswith(old + "."):
            return new + rest[len(old) :]
    return rest


def unet_key(key: str, layers: int) -> str:
    """The LDM name of a UNet2DConditionModel tensor (``layers``: its layers_per_block)."""
    from diffusers.loaders.single_file_utils import DIFFUSERS_TO_LDM_MAPPING

    top = DIFFUSERS_TO_LDM_MAPPING["unet"]["layers"]
    if key in top:
        return top[key]
    parts = key.split(".")
    if parts[0] == "down_blocks":
        block, kind, index, rest = int(parts[1]), parts[2], int(parts[3]), ".".join(parts[4:])
        first = 1 + block * (layers + 1)
        if kind == "resnets":
            return f"input_blocks.{first + index}.0.{_rename(rest, UNET_RESNET)}"
        if kind == "attentions":
            return f"input_blocks.{first + index}.1.{rest}"
        if kind == "downsamplers":  # down_blocks.B.downsamplers.0.conv.weight
            return f"input_blocks.{first + layers}.0.op.{'.'.join(parts[5:])}"
    if parts[0] == "mid_block":
        kind, index, rest = parts[1], int(parts[2]), ".".join(parts[3:])
        if kind == "resnets":
            return f"middle_block.{2 * index}.{_rename(rest, UNET_RESNET)}"
        return f"middle_block.1.{rest}"
    if parts[0] == "up_blocks":
        block, kind, index, rest = int(parts[1]), parts[2], int(parts[3]), ".".join(parts[4:])
        first = block * (layers + 1)
        if kind == "resnets":
            return f"output_blocks.{first + index}.0.{_rename(rest, UNET_RESNET)}"
        if kind == "attentions":
            return f"output_blocks.{first + index}.1.{rest}"
        if kind == "upsamplers":  # after the block's attention, if it has one
            return f"output_blocks.{first + layers}.{{up}}.conv.{'.'.join(parts[5:])}"
    raise ValueError(f"no LDM name for UNet tensor '{key}'")


def vae_key(key: str, blocks: int) -> str:
    """The LDM name of an AutoencoderKL tensor (``blocks``: its number of up/down blocks)."""
    from diffusers.loaders.single_file_utils import DIFFUSERS_TO_LDM_MAPPING

    top = DIFFUSERS_TO_LDM_MAPPING["vae"]
    if key in top:
        return top[key]
    side, parts = key.split(".", 1)[0], key.split(".")[1:]
    shortcut = (("conv_shortcut", "nin_shortcut"),)
    if parts[0] == "down_blocks":
        block, kind = int(parts[1]), parts[2]
        if kind == "resnets":
            rest = _rename(".".join(parts[4:]), shortcut)
            return f"{side}.down.{block}.block.{parts[3]}.{rest}"
        return f"{side}.down.{block}.downsample.{'.'.join(parts[4:])}"
    if parts[0] == "up_blocks":
        block, kind = blocks - 1 - int(parts[1]), parts[2]
        if kind == "resnets":
            rest = _rename(".".join(parts[4:]), shortcut)
            return f"{side}.up.{block}.block.{parts[3]}.{rest}"
        return f"{side}.up.{block}.upsample.{'.'.join(parts[4:])}"
    if parts[0] == "mid_block":
        kind, index, rest = parts[1], int(parts[2]), ".".join(parts[3:])
        if kind == "resnets":
            return f"{side}.mid.block_{index + 1}.{_rename(rest, shortcut)}"
        return f"{side}.mid.attn_1.{_rename(rest, VAE_ATTENTION)}"
    raise ValueError(f"no LDM name for VAE tensor '{key}'")


def _weights(folder: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    found: dict[str, Any] = {}
    for f in sorted(folder.glob("*.safetensors")):
        found.update(load_file(str(f)))
    return found


def single_file(folder: Path, out: Path, *, configs: str | None = None) -> Path:
    """Write the SD 1.x pipeline ``folder`` as the LDM checkpoint ``out`` (atomically); ``out``.
    ``configs`` names the diffusers folder whose configs load it (kept in the file's metadata,
    ``CONFIGS_KEY``; ``diffusers/generate`` uses it before guessing the family's folder)."""
    import json

    from safetensors.torch import save_file

    unet_cfg = json.loads((folder / "unet" / "config.json").read_text())
    vae_cfg = json.loads((folder / "vae" / "config.json").read_text())
    layers = int(unet_cfg["layers_per_block"])
    tensors: dict[str, Any] = {}
    unet = _weights(folder / "unet")
    attended = {  # output_blocks whose attention sits at slot 1 (the upsampler then at 2)
        k.split(".")[1] for k in unet if k.startswith("up_blocks.") and ".attentions." in k
    }
    for key, value in unet.items():
        name = unet_key(key, layers)
        if "{up}" in name:
            name = name.replace("{up}", "2" if key.split(".")[1] in attended else "1")
        tensors[UNET + name] = value
    blocks = len(vae_cfg["down_block_types"])
    for key, value in _weights(folder / "vae").items():
        name = vae_key(key, blocks)
        if ".mid.attn_1." in name and value.ndim == 2:
            value = value[:, :, None, None]  # LDM's attention projections are 1x1 convolutions
        tensors[VAE + name] = value
    for key, value in _weights(folder / "text_encoder").items():
        # transformers >= 5.6 saves CLIPTextModel flat; LDM names keep its text_model level
        tensors[CLIP + (key if key.startswith("text_model.") else f"text_model.{key}")] = value
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    metadata = {CONFIGS_KEY: configs} if configs else None
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp), metadata=metadata)
    tmp.replace(out)
    return out
