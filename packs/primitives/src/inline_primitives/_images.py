"""Pixels <-> latents: PNG in and out, VAE encode, and VAE decode (tiled at 1024x1024 and above)."""

from __future__ import annotations

import io
from typing import Any, Final

TILE_FROM_PIXELS: Final = 1024 * 1024
TILE_SAMPLE: Final = 512
MULTIPLE: Final = 16  # VAE downscale 8 x transformer patch 2


def latent_size(width: int, height: int) -> tuple[int, int]:
    """Latent (height, width) for an image, as ``ZImagePipeline.prepare_latents`` rounds it."""
    return 2 * (int(height) // MULTIPLE), 2 * (int(width) // MULTIPLE)


def encode_png(pixels: Any) -> bytes:
    """An (H, W, 3) uint8 array as PNG bytes."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(buf, format="PNG")
    return buf.getvalue()


def decode(vae: Any, latents: Any, *, tiled: bool | None = None) -> list[Any]:
    """Latents (the sampler's scale) to (H, W, 3) uint8 arrays, as the pipeline post-processes
    them. Decodes in tiles when the image has 1024x1024 pixels or more (or ``tiled``)."""
    import torch

    from ._loading import execution_device

    if tiled is None and getattr(vae, "_inline_tiling", False):
        tiled = True  # the memory plan asks for it (offloaded, or a large batch)
    cfg = vae.config
    with torch.no_grad():
        z = latents.to(device=execution_device(vae), dtype=vae.dtype)
        z = z / cfg.scaling_factor + cfg.shift_factor
        scale = 2 ** (len(cfg.block_out_channels) - 1)
        pixels = z.shape[-1] * z.shape[-2] * scale * scale
        if tiled if tiled is not None else pixels >= TILE_FROM_PIXELS:
            vae.tile_sample_min_size = TILE_SAMPLE
            vae.tile_latent_min_size = TILE_SAMPLE // scale
            vae.tile_overlap_factor = 0.25
            hook = getattr(vae, "_hf_hook", None)
            if hook is not None:  # model offload: what ``decode``'s own hook does, which
                hook.pre_forward(vae)  # ``tiled_decode`` skips (the weights come to the GPU)
            image = vae.tiled_decode(z, return_dict=False)[0]
        else:
            image = vae.decode(z, return_dict=False)[0]
        image = (image / 2 + 0.5).clamp(0, 1)
        arrays = image.cpu().permute(0, 2, 3, 1).float().numpy()
    out = [(a * 255).round().astype("uint8") for a in arrays]
    del image, arrays, z
    return out


def load_rgb(data: bytes, size: tuple[int, int] | None = None) -> Any:
    """Image bytes (any format Pillow reads) as RGB, resized to ``size`` (w, h) or down to a
    multiple of 16; raises ``ValueError`` for bytes that are no image."""
    from PIL import Image, UnidentifiedImageError

    try:
        img = Image.open(io.BytesIO(data))
        img.load()
    except (UnidentifiedImageError, OSError) as exc:
        raise ValueError(f"the image input is not a readable image: {exc}") from None
    img = img.convert("RGB")
    if size is None:
        w, h = img.size
        size = (max(MULTIPLE, w // MULTIPLE * MULTIPLE), max(MULTIPLE, h // MULTIPLE * MULTIPLE))
    if img.size != size:
        img = img.resize(size, Image.Resampling.LANCZOS)
    return img


def encode(vae: Any, data: bytes, size: tuple[int, int] | None = None) -> Any:
    """Image bytes to latents in the sampler's scale (the distribution's mode: deterministic)."""
    import numpy as np
    import torch

    img = load_rgb(data, size)
    arr = np.asarray(img, dtype=np.float32) / 255.0
    x = torch.from_numpy(arr).permute(2, 0, 1).unsqueeze(0) * 2 - 1
    from ._loading import execution_device

    cfg = vae.config
    with torch.no_grad():
        dist = vae.encode(x.to(device=execution_device(vae), dtype=vae.dtype)).latent_dist
        z = dist.mode().float()
        return (z - cfg.shift_factor) * cfg.scaling_factor
