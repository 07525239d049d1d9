"""The primitives: the contract's low-level Z-Image vocabulary, every node hidden.

``load/*`` output portable references (plain data any pack may read); ``encode/text``,
``latent/empty``, ``sample`` and ``vae/*`` pass conditioning and latents as handles that stay in
this worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from inline_sdk import Context, Image, Output, Param, Port, node

from ._lora import LoraStack
from ._refs import CATEGORIES, ModelRef, as_ref, inspect_model
from ._resolve import pick_file
from ._text import Conditioning
from .runtime._settings import max_batch

PREVIEW_EVERY = 4
TextEncoderOut = Annotated[
    ModelRef, Output("text_encoder", "Text encoder", kind="text-encoder", portable=True)
]


@dataclass
class Latent:
    """Latents in the sampler's scale, (batch, 16, H/8, W/8)."""

    samples: Any


def _load_ref(ctx: Context, kind: str, file: str) -> ModelRef:
    ctx.phase("loading", "Checking model file…")
    path = pick_file(ctx.models_dir, CATEGORIES[kind], file)
    return inspect_model(path, kind)


@node("load/diffusion-model", title="Load Diffusion Model", category="Loaders", icon="box",
      hidden=True)  # fmt: skip
def load_diffusion_model(
    ctx: Context,
    *,
    file: Annotated[str, Param("Model", widget="select", options_from="diffusion_models")] = "",
) -> Annotated[ModelRef, Output("model", "Model", kind="model", portable=True)]:
    """A checked reference to a diffusion model file or folder."""
    return _load_ref(ctx, "diffusion", file)


@node("load/vae", title="Load VAE", category="Loaders", icon="box", hidden=True)
def load_vae(
    ctx: Context,
    *,
    file: Annotated[str, Param("VAE", widget="select", options_from="vae")] = "",
) -> Annotated[ModelRef, Output("vae", "VAE", kind="vae", portable=True)]:
    """A checked reference to a VAE file or folder."""
    return _load_ref(ctx, "vae", file)


@node("load/text-encoder", title="Load Text Encoder", category="Loaders", icon="box",
      hidden=True)  # fmt: skip
def load_text_encoder(
    ctx: Context,
    *,
    file: Annotated[str, Param("Text encoder", widget="select", options_from="text_encoders")] = "",
) -> TextEncoderOut:
    """A checked reference to a text encoder file or folder."""
    return _load_ref(ctx, "text_encoder", file)


@node("load/lora", title="Load LoRA", category="Loaders", icon="box", hidden=True)
def load_lora(
    ctx: Context,
    lora: Annotated[Any, Port("LoRA", kind="lora")] = None,
    *,
    file: Annotated[str, Param("LoRA", widget="select", options_from="loras")] = "",
    strength: Annotated[float, Param("Strength", min=-2.0, max=2.0, step=0.05)] = 1.0,
) -> Annotated[LoraStack, Output("lora", "LoRA", kind="lora", portable=True)]:
    """The arriving LoRA stack with ``(file, strength)`` appended (its layout checked from the
    file's keys), so chained ``load/lora`` nodes stack adapters in wiring order."""
    from ._lora import LoraItem, as_stack, read_layout

    ctx.phase("loading", "Checking LoRA file…")
    path = pick_file(ctx.models_dir, "loras", file)
    item = LoraItem(file=str(path), strength=float(strength), layout=read_layout(path))
    return LoraStack(loras=[*as_stack(lora).loras, item])


@node("encode/text", title="Encode Text", category="Conditioning", icon="type", hidden=True)
def encode_text(
    ctx: Context,
    text_encoder: Annotated[Any, Port("Text encoder", kind="text-encoder")],
    prompt: Annotated[str, Port("Prompt")],
) -> Annotated[Conditioning, Output("conditioning", "Conditioning", kind="conditioning")]:
    """The prompt's features from the text encoder (under inference mode)."""
    from ._runtime import get_text_encoder
    from ._text import encode_prompts

    if not prompt or not prompt.strip():
        raise ValueError("Encode Text needs a prompt.")
    ref = as_ref(text_encoder, "text_encoder", "Encode Text 'text_encoder'")
    ctx.phase("loading", "Loading text encoder…")
    te = get_text_encoder(ref, ctx)
    ctx.phase("encode", "Encoding prompt…")
    return encode_prompts(te, [prompt])


@node("latent/empty", title="Empty Latent", category="Latent", icon="square", hidden=True)
def empty_latent(
    ctx: Context,
    *,
    width: Annotated[int, Param("Width", min=64, max=4096, step=8)] = 1024,
    height: Annotated[int, Param("Height", min=64, max=4096, step=8)] = 1024,
    batch: Annotated[int, Param("Batch", min=1, max=16, step=1)] = 1,
) -> Annotated[Latent, Output("latent", "Latent", kind="latent")]:
    """Zero latents sized for Z-Image (sides rounded down to a multiple of 16 pixels)."""
    from ._loading import ensure_imports

    ensure_imports()
    import torch

    from ._images import latent_size

    h, w = latent_size(width, height)
    return Latent(torch.zeros((batch, 16, max(h, 2), max(w, 2)), dtype=torch.float32))


@node("sample", title="Sample", category="Sampling", icon="wand", hidden=True,
      concurrency=max_batch())  # fmt: skip
def sample(
    ctx: Context,
    model: Annotated[Any, Port("Model", kind="model")],
    positive: Annotated[Conditioning, Port("Positive", kind="conditioning")],
    negative: Annotated[Conditioning | None, Port("Negative", kind="conditioning")],
    latent: Annotated[Latent, Port("Latent", kind="latent")],
    lora: Annotated[Any, Port("LoRA", kind="lora")] = None,
    *,
    steps: Annotated[int, Param("Steps", min=1, max=200, step=1)] = 20,
    cfg: Annotated[float, Param("CFG", min=0.0, max=30.0, step=0.1)] = 5.0,
    sampler: Annotated[
        Literal["euler", "dpmpp_2m", "heun"],
        Param("Sampler", options=[("euler", "Euler"), ("dpmpp_2m", "DPM++ 2M"), ("heun", "Heun")]),
    ] = "euler",
    scheduler: Annotated[
        Literal["simple", "karras"],
        Param("Scheduler", options=[("simple", "Simple"), ("karras", "Karras")]),
    ] = "simple",
    seed: Annotated[int, Param("Seed (-1 = random)", widget="seed")] = -1,
    denoise: Annotated[float, Param("Denoise", min=0.0, max=1.0, step=0.05, advanced=True)] = 1.0,
    shift: Annotated[float, Param("Shift", min=0.0, max=20.0, step=0.05, advanced=True)] = 3.0,
) -> Annotated[Latent, Output("latent", "Latent", kind="latent")]:
    """Z-Image's flow-matching denoise loop. ``cfg`` is ComfyUI's (1 = no guidance; Z-Image
    Turbo's guidance 0 is cfg 1); below 1 ``denoise`` keeps part of the input latent (img2img);
    ``shift`` is the schedule's (ComfyUI's ``ModelSamplingAuraFlow``); ``lora``: a stack from
    ``load/lora``, merged into the loaded weights for this call (reversibly)."""
    import random

    from ._lora import lora_weights
    from ._runtime import get_model

    ref = as_ref(model, "diffusion", "Sample 'model'")
    ctx.phase("loading", "Loading model…")
    transformer = get_model(ref, ctx)
    check_conditioning(transformer, positive)
    seed = seed if seed >= 0 else random.SystemRandom().randrange(2**32)
    out = run_sampler(
        ctx,
        transformer,
        positive,
        negative,
        latent.samples,
        steps=steps,
        guidance=max(0.0, cfg - 1.0),
        sampler=sampler,
        scheduler=scheduler,
        seed=seed,
        denoise=denoise,
        shift=shift,
        model_file=ref.file,
        loras=lora_weights(transformer, ref.file, lora),
    )
    return Latent(out)


def check_conditioning(transformer: Any, cond: Conditioning) -> None:
    """Refuse features whose width the transformer cannot read, naming both."""
    want = int(transformer.config.cap_feat_dim)
    got = int(cond.embeds[0].shape[-1])
    if got != want:
        raise ValueError(
            f"the text encoder '{cond.text_encoder}' gives {got}-wide features but the diffusion "
            f"model expects {want}: they are not from the same family or size"
        )


def run_sampler(
    ctx: Context,
    transformer: Any,
    positive: Conditioning,
    negative: Conditioning | None,
    latents: Any,
    **options: Any,
) -> Any:
    """One sample call through the worker's denoiser (``runtime``: batched with compatible
    calls of other runs, or split across devices): a progress event every step, a preview every
    few steps and cancellation at step granularity."""
    from .runtime import denoise

    return denoise(ctx, transformer, positive, negative, latents, **options)


@node("vae/decode", title="VAE Decode", category="VAE", icon="image", output_kind="image",
      hidden=True)  # fmt: skip
def vae_decode(
    ctx: Context,
    vae: Annotated[Any, Port("VAE", kind="vae")],
    latent: Annotated[Latent, Port("Latent", kind="latent")],
) -> Annotated[Image, Output("image", "Image")]:
    """The latents as a PNG image (tiled decode at 1024x1024 and above)."""
    from ._images import decode, encode_png
    from ._runtime import get_model

    ref = as_ref(vae, "vae", "VAE Decode 'vae'")
    ctx.phase("loading", "Loading VAE…")
    model = get_model(ref, ctx)
    ctx.phase("decode", "Decoding…")
    pixels = decode(model, latent.samples)
    ctx.phase("save", "Saving…", 1.0)
    return Image(encode_png(pixels[0]), params={"vae": ref.file})


@node("vae/encode", title="VAE Encode", category="VAE", icon="square", hidden=True)
def vae_encode(
    ctx: Context,
    vae: Annotated[Any, Port("VAE", kind="vae")],
    image: Annotated[Image, Port("Image")],
) -> Annotated[Latent, Output("latent", "Latent", kind="latent")]:
    """Any image as latents (sides rounded down to a multiple of 16 pixels), for img2img."""
    from ._images import encode
    from ._runtime import get_model

    if image is None:
        raise ValueError("VAE Encode needs an image input.")
    ref = as_ref(vae, "vae", "VAE Encode 'vae'")
    ctx.phase("loading", "Loading VAE…")
    model = get_model(ref, ctx)
    ctx.phase("encode", "Encoding image…")
    return Latent(encode(model, image.tobytes()))
