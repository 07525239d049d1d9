"""The primitives pack: the contract's low-level diffusion nodes, and the library behind them.

Other packs (``zimage``) reuse the library: family detection from safetensors headers, checked
loading straight to the device, the tokenizer rules, prompt encoding, the sampler and the VAE.
"""

from inline_sdk import NodeSpec, hookimpl

from ._errors import KeysMismatch, ModelFileError, NotSafetensors, UnknownModel, WontFit
from ._families import FAMILIES, Component, Detection, Family, detect
from ._header import WeightsHeader, read_header
from ._loading import ModelCache, Placement, apply_placement, default_placement, free_memory
from ._lora import LoraItem, LoraRefused, LoraStack, LoraWeights, lora_weights, use_loras
from ._nodes import (
    Latent,
    check_conditioning,
    empty_latent,
    encode_text,
    load_diffusion_model,
    load_lora,
    load_text_encoder,
    load_vae,
    run_sampler,
    sample,
    vae_decode,
    vae_encode,
)
from ._refs import CATEGORIES, ModelRef, as_ref, inspect_model
from ._resolve import check_name, entries, is_weight_entry
from ._text import Conditioning, TextEncoder, TokenizerMissing, find_tokenizer
from ._zimage import TOKENIZER_FOLDER, ZIMAGE

__all__ = (
    "CATEGORIES",
    "FAMILIES",
    "TOKENIZER_FOLDER",
    "ZIMAGE",
    "Component",
    "Conditioning",
    "Detection",
    "Family",
    "KeysMismatch",
    "Latent",
    "LoraItem",
    "LoraRefused",
    "LoraStack",
    "ModelCache",
    "ModelFileError",
    "ModelRef",
    "NotSafetensors",
    "Placement",
    "TextEncoder",
    "TokenizerMissing",
    "UnknownModel",
    "WeightsHeader",
    "WontFit",
    "apply_placement",
    "as_ref",
    "check_conditioning",
    "check_name",
    "default_placement",
    "detect",
    "entries",
    "find_tokenizer",
    "free_memory",
    "inline_nodes",
    "inspect_model",
    "is_weight_entry",
    "read_header",
    "run_sampler",
    "LoraWeights",
    "lora_weights",
    "use_loras",
)


@hookimpl
def inline_nodes() -> list[NodeSpec]:
    """The nodes of this pack."""
    return [
        load_diffusion_model,
        load_vae,
        load_text_encoder,
        load_lora,
        encode_text,
        empty_latent,
        sample,
        vae_decode,
        vae_encode,
    ]
