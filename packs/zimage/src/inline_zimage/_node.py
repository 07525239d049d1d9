"""``alibaba/z-image-turbo``: the contract's one-click node (prompt in, PNG out).

It resolves its three components (see ``_resolve``), loads them through the primitives library
(checked against the family's layout, mapped straight to the device, kept between runs and freed
when another file is picked), and runs the same encode / sample / decode code as the primitive
graph, so both give the same image.
"""

from __future__ import annotations

import random
from typing import Annotated, Any, Literal

from inline_primitives.runtime import decode_batched, max_batch
from inline_sdk import Context, Image, Output, Param, Port, node

from ._resolve import PULL_COMMAND, RECOMMENDED, ModelsMissing, resolve, resolve_tokenizer

__all__ = ("PULL_COMMAND", "RECOMMENDED", "ModelsMissing", "ZImageTurbo")

SEED_LIMIT = 2**32


@node(
    "alibaba/z-image-turbo",
    title="Z-Image Turbo",
    category="Generate",
    icon="wand",
    output_kind="image",
    concurrency=max_batch(),  # compatible calls of concurrent runs denoise as one batch
)
class ZImageTurbo:
    """Z-Image Turbo text-to-image (and img2img with ``image`` and ``strength``)."""

    def run(
        self,
        ctx: Context,
        prompt: Annotated[str, Port("Prompt")],
        model_in: Annotated[Any, Port("Diffusion model", kind="model", id="model")] = None,
        vae_in: Annotated[Any, Port("VAE", kind="vae", id="vae")] = None,
        text_encoder_in: Annotated[
            Any, Port("Text encoder", kind="text-encoder", id="text_encoder")
        ] = None,
        lora: Annotated[Any, Port("LoRA", kind="lora")] = None,
        image: Annotated[Image | None, Port("Image (img2img)")] = None,
        *,
        negative_prompt: Annotated[str, Param("Negative prompt", widget="textarea")] = "",
        width: Annotated[int, Param("Width", min=256, max=2048, step=64)] = 1024,
        height: Annotated[int, Param("Height", min=256, max=2048, step=64)] = 1024,
        steps: Annotated[int, Param("Steps", min=1, max=100, step=1)] = 8,
        guidance: Annotated[float, Param("Guidance (CFG)", min=0.0, max=20.0, step=0.5)] = 0.0,
        sampler: Annotated[
            Literal["euler", "euler_a"],
            Param(
                "Sampler",
                options=[("euler", "Euler"), ("euler_a", "Euler Ancestral")],
                advanced=True,
            ),
        ] = "euler",
        scheduler: Annotated[
            Literal["simple", "karras", "exponential", "beta"],
            Param(
                "Scheduler",
                options=[
                    ("simple", "Simple"),
                    ("karras", "Karras"),
                    ("exponential", "Exponential"),
                    ("beta", "Beta"),
                ],
                advanced=True,
            ),
        ] = "simple",
        strength: Annotated[
            float, Param("Denoise strength", min=0.0, max=1.0, step=0.05, advanced=True)
        ] = 0.6,
        seed: Annotated[int, Param("Seed (-1 = random)", widget="seed")] = -1,
        model: Annotated[
            str,
            Param(
                "Diffusion model", widget="select", options_from="diffusion_models", advanced=True
            ),
        ] = "",
        text_encoder: Annotated[
            str,
            Param("Text encoder", widget="select", options_from="text_encoders", advanced=True),
        ] = "",
        vae: Annotated[str, Param("VAE", widget="select", options_from="vae", advanced=True)] = "",
    ) -> Annotated[Image, Output("image", "Image")]:
        from inline_primitives import check_conditioning, lora_weights, run_sampler
        from inline_primitives.runtime import encode, encode_png, encode_prompts, latent_size

        if not prompt or not prompt.strip():
            raise ValueError("Z-Image needs a prompt.")
        refs, loaded = _load(
            ctx, (model_in, model), (vae_in, vae), (text_encoder_in, text_encoder),
            width=width, height=height, guidance=guidance,
        )  # fmt: skip
        transformer, autoencoder, te = loaded["diffusion"], loaded["vae"], loaded["text_encoder"]
        weights = lora_weights(transformer, refs["diffusion"].file, lora)  # applied per batch
        ctx.check_cancelled()

        positive = encode_prompts(te, [prompt])
        check_conditioning(transformer, positive)
        negative = encode_prompts(te, [negative_prompt]) if guidance > 0 else None
        seed = seed if seed >= 0 else random.SystemRandom().randrange(SEED_LIMIT)
        if image is not None:
            latents = encode(autoencoder, image.tobytes(), (width, height))
            denoise = strength
        else:
            import torch

            h, w = latent_size(width, height)
            latents = torch.zeros((1, 16, h, w), dtype=torch.float32)
            denoise = 1.0
        out = run_sampler(
            ctx,
            transformer,
            positive,
            negative,
            latents,
            steps=max(1, steps),
            guidance=guidance,
            sampler=sampler,
            scheduler=scheduler,
            seed=seed,
            denoise=denoise,
            model_file=refs["diffusion"].file,
            loras=weights,
        )
        pixels = decode_batched(ctx, autoencoder, out)
        ctx.phase("save", "Saving…", 1.0)
        params: dict[str, Any] = {
            "model": refs["diffusion"].file,
            "prompt": prompt,
            "negative_prompt": negative_prompt,
            "width": width,
            "height": height,
            "steps": max(1, steps),
            "guidance": guidance,
            "sampler": sampler,
            "scheduler": scheduler,
            "seed": seed,
        }
        if image is not None:
            params["strength"] = strength
        if weights.key:
            params["loras"] = [{"file": f, "strength": s} for f, s in weights.key]
        return Image(encode_png(pixels[0]), params=params)

    def warm(
        self,
        ctx: Context,
        *,
        model: str,
        text_encoder: str,
        vae: str,
        width: int,
        height: int,
        guidance: float,
    ) -> None:
        """Load the three components the picks name (a deployment's warm-up), placed for a
        render of ``width`` x ``height``."""
        _load(ctx, (None, model), (None, vae), (None, text_encoder),
              width=width, height=height, guidance=guidance)  # fmt: skip


def _load(
    ctx: Context,
    model: tuple[Any, str],
    vae: tuple[Any, str],
    text_encoder: tuple[Any, str],
    *,
    width: int,
    height: int,
    guidance: float,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The components (each a loader's output or a file pick), resolved, checked and loaded
    with one ask to the broker (the host's policy places the render as a whole)."""
    from inline_primitives import inspect_model
    from inline_primitives.runtime import activation_bytes, get_models

    ctx.phase("loading", "Loading model…", 0.0)
    found = {
        "diffusion": resolve(ctx.models_dir, "diffusion", *model),
        "vae": resolve(ctx.models_dir, "vae", *vae),
        "text_encoder": resolve(ctx.models_dir, "text_encoder", *text_encoder),
    }
    missing = [r for r in found.values() if r.path is None]
    te_path = found["text_encoder"].path
    if te_path is not None:
        tokenizer = resolve_tokenizer(te_path)
        if tokenizer.path is None:
            missing.append(tokenizer)
    if missing:
        raise ModelsMissing(missing)
    refs = {kind: inspect_model(r.path, kind) for kind, r in found.items() if r.path}
    loaded = get_models(refs, ctx, activation=activation_bytes(width, height, cfg=guidance > 0))
    return refs, loaded
