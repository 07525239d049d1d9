"""The image sizes a model makes, checked before an images request runs (a 400 naming ``size``).

A node's ``width`` and ``height`` params declare their range and step. A diffusers pipeline
folder makes sides that are multiples of its VAE's scale factor (2 to the number of its
``block_out_channels`` less one) times its denoiser's patch size (2 at least for the families
that pack latents 2x2, such as Flux), from ``MIN_SIDE`` up: what the diffusers pack's node
checks once the pipeline is loaded, read here from the folder's config files (never torch).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

from inline_sdk import Descriptor

from ._schemas import OpenAIError

__all__ = ("MIN_SIDE", "check_size", "folder_multiple")

#: The smallest side a pipeline folder makes (the diffusers pack's own floor).
MIN_SIDE: Final = 64
#: Pipeline classes whose latents are packed 2x2 before the denoiser.
PACKED: Final = ("Flux", "QwenImage", "Chroma")


def _config(path: Path) -> dict[str, Any]:
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def folder_multiple(folder: Path) -> int:
    """What each side of an image from the pipeline folder ``folder`` is a multiple of."""
    index = _config(folder / "model_index.json")
    vae = _config(folder / "vae" / "config.json")
    blocks = vae.get("block_out_channels")
    scale = 2 ** (len(blocks) - 1) if isinstance(blocks, list) and blocks else 8
    denoiser = _config(folder / "transformer" / "config.json") or _config(
        folder / "unet" / "config.json"
    )
    patch = denoiser.get("patch_size")
    if patch is None and isinstance(denoiser.get("all_patch_size"), list):
        patch = denoiser["all_patch_size"][0]
    patch = patch if isinstance(patch, int) and patch > 0 else 1
    name = str(index.get("_class_name", ""))
    if any(name.startswith(p) for p in PACKED):
        patch = max(patch, 2)
    return scale * patch


def _bounds(descriptor: Descriptor, key: str) -> tuple[float, float, float]:
    param = descriptor.param(key)
    low = param.min if param is not None and param.min is not None else 1
    high = param.max if param is not None and param.max is not None else float("inf")
    step = param.step if param is not None and param.step else 1
    return low, high, step


def check_size(
    descriptor: Descriptor, folder: Path | None, model: str, width: int, height: int
) -> None:
    """Raise a 400 naming ``size`` unless ``model`` (run by ``descriptor``, from the pipeline
    ``folder`` when it is one) makes ``width`` x ``height``."""
    size = f"{width}x{height}"
    for key, side in (("width", width), ("height", height)):
        low, high, step = _bounds(descriptor, key)
        if folder is not None:
            low, step = max(low, MIN_SIDE), folder_multiple(folder)
        if not low <= side <= high or side % step:
            most = "" if high == float("inf") else f" to {high:g}"
            raise OpenAIError(
                400,
                f"'size' {size} is not a size {model!r} makes: its {key} must be a multiple of "
                f"{step:g} from {low:g}{most}.",
                param="size",
            )
