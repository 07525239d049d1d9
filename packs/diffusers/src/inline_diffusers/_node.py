"""``diffusers/generate``: any diffusers pipeline folder as a node.

Params left at their "default" values (0, -1, empty) are not passed: the pipeline's own defaults
apply, and the take records the values used. A param set to anything else must be one the
pipeline's ``__call__`` takes (``steps`` -> ``num_inference_steps``, ``guidance`` ->
``guidance_scale``...): otherwise the call is refused, naming the class and the param.
"""

from __future__ import annotations

import inspect
import io
import random
from typing import Annotated, Any, Final

from inline_sdk import Context, Image, Output, Param, Port, node

from ._checkpoint import resolve_checkpoint
from ._folder import Folder, resolve
from ._pipeline import Loaded, Pipelines, import_diffusers, set_tiling, uncompile

SEED_LIMIT: Final = 2**32
MIN_SIDE: Final = 64
#: Our params -> the diffusers ``__call__`` argument each one sets.
ARGUMENTS: Final = {
    "negative_prompt": "negative_prompt",
    "width": "width",
    "height": "height",
    "steps": "num_inference_steps",
    "guidance": "guidance_scale",
    "strength": "strength",
    "seed": "generator",
}
PREVIEWS: Final = 4  # about this many previews per render
PIPELINES = Pipelines()


class ParamRefused(ValueError):
    """A param the pipeline's ``__call__`` does not take."""


def call_arguments(pipe: Any) -> dict[str, inspect.Parameter]:
    """The named arguments of ``pipe.__call__`` (``**kwargs`` catches deprecated ones only)."""
    params = inspect.signature(type(pipe).__call__).parameters
    return {
        k: p
        for k, p in params.items()
        if k != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    }


def multiple_of(pipe: Any) -> int:
    """Sizes the pipeline makes: multiples of its VAE scale factor times its patch size (2 for
    families that pack latents 2x2, such as Flux)."""
    scale = int(getattr(pipe, "vae_scale_factor", 8) or 8)
    denoiser = getattr(pipe, "transformer", None) or getattr(pipe, "unet", None)
    patch = int(getattr(getattr(denoiser, "config", None), "patch_size", None) or 1)
    if hasattr(pipe, "_pack_latents"):
        patch = max(patch, 2)
    return scale * patch


def default_size(pipe: Any) -> tuple[int, int]:
    """The pipeline's own default (width, height)."""
    scale = int(getattr(pipe, "vae_scale_factor", 8) or 8)
    size = getattr(pipe, "default_sample_size", None)
    if size is None:
        denoiser = getattr(pipe, "transformer", None) or getattr(pipe, "unet", None)
        size = getattr(getattr(denoiser, "config", None), "sample_size", None) or 128
    if isinstance(size, list | tuple):
        return int(size[-1]) * scale, int(size[0]) * scale
    return int(size) * scale, int(size) * scale


def _default(args: dict[str, inspect.Parameter], name: str) -> Any:
    p = args.get(name)
    return None if p is None or p.default is inspect.Parameter.empty else p.default


def _preview(latents: Any) -> bytes | None:
    """A small PNG of the first three latent channels (4-D latents only)."""
    import numpy as np
    from PIL import Image as PILImage

    if getattr(latents, "ndim", 0) != 4 or latents.shape[1] < 3:
        return None
    x = latents[0, :3].float().cpu().numpy()
    lo, hi = x.min(axis=(1, 2), keepdims=True), x.max(axis=(1, 2), keepdims=True)
    x = ((x - lo) / np.maximum(hi - lo, 1e-6) * 255).astype(np.uint8).transpose(1, 2, 0)
    img = PILImage.fromarray(x, "RGB")
    img.thumbnail((128, 128))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def _callbacks(ctx: Context, pipe: Any, args: dict[str, inspect.Parameter], steps: int) -> dict:
    """Progress, previews and cancel at every step, through whichever hook the pipeline has."""
    every = max(1, steps // PREVIEWS)

    def step(i: int, latents: Any) -> None:
        total = int(getattr(pipe, "_num_timesteps", 0) or steps)
        ctx.progress(min(i + 1, total), total)  # raises Cancelled: it leaves the pipeline
        if latents is not None and (i + 1) % every == 0 and i + 1 < total:
            png = _preview(latents)
            if png is not None:
                ctx.preview(png)

    if "callback_on_step_end" in args:
        inputs = getattr(pipe, "_callback_tensor_inputs", [])

        def on_step_end(_pipe: Any, i: int, _t: Any, kw: dict[str, Any]) -> dict[str, Any]:
            step(i, kw.get("latents"))
            return kw

        out: dict[str, Any] = {"callback_on_step_end": on_step_end}
        if "callback_on_step_end_tensor_inputs" in args:
            out["callback_on_step_end_tensor_inputs"] = ["latents"] if "latents" in inputs else []
        return out
    if "callback" in args:  # older pipelines (PixArt-Alpha): callback(step, timestep, latents)
        out = {"callback": lambda i, _t, latents: step(i, latents)}
        if "callback_steps" in args:
            out["callback_steps"] = 1
        return out
    ctx.log.info("%s has no step callback: no progress per step", type(pipe).__name__)
    return {}


@node(
    "diffusers/generate",
    title="Diffusers pipeline",
    category="Generate",
    icon="wand",
    output_kind="image",
)
class Generate:
    """Text-to-image with any diffusers pipeline folder, or a single-file checkpoint with a
    folder's configs; img2img with ``image``."""

    def warm(
        self,
        ctx: Context,
        *,
        model: str,
        checkpoint: str,
        width: int,
        height: int,
        guidance: float,
    ) -> None:
        """Load the pipeline the picks name (a deployment's warm-up)."""
        _load(ctx, model, checkpoint, width, height, guidance)

    def run(
        self,
        ctx: Context,
        prompt: Annotated[str, Port("Prompt")],
        image: Annotated[Image | None, Port("Image (img2img)")] = None,
        *,
        model: Annotated[
            str, Param("Model (models/diffusers/)", widget="select", options_from="diffusers")
        ] = "",
        checkpoint: Annotated[
            str,
            Param(
                "Single-file checkpoint (models/checkpoints/; 'model' then gives its configs)",
                widget="select",
                options_from="checkpoints",
            ),
        ] = "",
        negative_prompt: Annotated[str, Param("Negative prompt", widget="textarea")] = "",
        # step 8: the VAE scale factor of every diffusers family, so no size a pipeline makes is
        # refused up front; the node then checks the exact multiple of the pipeline picked (its
        # VAE scale factor times its patch size: 8 for Stable Diffusion, 16 for PixArt or Flux)
        width: Annotated[int, Param("Width (0 = the model's)", min=0, max=8192, step=8)] = 0,
        height: Annotated[int, Param("Height (0 = the model's)", min=0, max=8192, step=8)] = 0,
        steps: Annotated[int, Param("Steps (0 = the model's)", min=0, max=1000, step=1)] = 0,
        guidance: Annotated[
            float, Param("Guidance (-1 = the model's)", min=-1.0, max=100.0, step=0.5)
        ] = -1.0,
        seed: Annotated[int, Param("Seed (-1 = random)", widget="seed")] = -1,
        strength: Annotated[
            float, Param("Denoise strength (img2img; -1 = the model's)", min=-1.0, max=1.0)
        ] = -1.0,
    ) -> Annotated[Image, Output("image", "Image")]:
        if not prompt or not prompt.strip():
            raise ValueError("diffusers/generate needs a prompt.")
        folder, loaded = _load(ctx, model, checkpoint, width, height, guidance)
        import torch

        pipe = loaded.pipe if image is None else PIPELINES.img2img(loaded)
        ctx.check_cancelled()
        args = call_arguments(pipe)
        given = {
            "negative_prompt": bool(negative_prompt),
            "width": width > 0,
            "height": height > 0,
            "steps": steps > 0,
            "guidance": guidance >= 0,
            "strength": strength >= 0,
            "seed": True,
        }
        init = None
        if image is not None:
            init = self._init_image(image, pipe, args, width, height)
            if "width" not in args:  # the image was resized instead
                given["width"] = given["height"] = False
        refused = [k for k, on in given.items() if on and ARGUMENTS[k] not in args]
        if refused:
            names = ", ".join(f"'{k}' ({ARGUMENTS[k]})" for k in refused)
            raise ParamRefused(
                f"diffusers/generate: {type(pipe).__name__}.__call__ does not take {names}; "
                f"leave {'it' if len(refused) == 1 else 'them'} at the default for model "
                f"'{folder.name}'"
            )
        step_mult = multiple_of(pipe)
        if image is None:
            dw, dh = default_size(pipe)
            width, height = width or dw, height or dh
        for key, side in (("width", width), ("height", height)):
            if side and (side < MIN_SIDE or side % step_mult):
                raise ValueError(
                    f"diffusers/generate: {key} {side} is not a size {type(pipe).__name__} makes: "
                    f"a multiple of {step_mult} (VAE scale x patch size), from {MIN_SIDE} up"
                )
        steps_used = steps or _default(args, "num_inference_steps") or 50
        guidance_used = guidance if guidance >= 0 else _default(args, "guidance_scale")
        seed = seed if seed >= 0 else random.SystemRandom().randrange(SEED_LIMIT)
        kwargs: dict[str, Any] = {
            "prompt": prompt,
            "num_inference_steps": steps_used,
            "generator": torch.Generator("cpu").manual_seed(seed),
        }
        if negative_prompt:
            kwargs["negative_prompt"] = negative_prompt
        if guidance >= 0:
            kwargs["guidance_scale"] = guidance
        if init is not None:
            kwargs["image"] = init
            if strength >= 0:
                kwargs["strength"] = strength
        if "width" in args and width:
            kwargs["width"], kwargs["height"] = width, height
        pixels = (width or init.size[0]) * (height or init.size[1]) if init else width * height
        tiled = set_tiling(pipe, loaded, pixels)
        kwargs.update(_callbacks(ctx, pipe, args, steps_used))
        out = self._call(pipe, loaded, kwargs)
        ctx.phase("save", "Saving…", 1.0)
        buf = io.BytesIO()
        out.save(buf, format="PNG")
        params: dict[str, Any] = {
            "model": folder.path.name,
            "pipeline": type(pipe).__name__,
            "prompt": prompt,
            "negative_prompt": negative_prompt,
            "width": out.size[0],
            "height": out.size[1],
            "steps": steps_used,
            "guidance": guidance_used,
            "seed": seed,
            "vae_tiling": tiled,
            "compile": "GRAPHED" if loaded.compiled else "eager",
        }
        if folder.checkpoint is not None:
            params["checkpoint"] = folder.checkpoint.name
        if image is not None:
            params["strength"] = strength if strength >= 0 else _default(args, "strength")
        return Image(buf.getvalue(), params=params)

    @staticmethod
    def _init_image(
        image: Image, pipe: Any, args: dict[str, inspect.Parameter], width: int, height: int
    ) -> Any:
        """The input as RGB; resized to ``width`` x ``height`` when the pipeline takes no size."""
        from PIL import Image as PILImage
        from PIL import UnidentifiedImageError

        try:
            img = PILImage.open(io.BytesIO(image.tobytes()))
            img.load()
        except (UnidentifiedImageError, OSError) as exc:
            raise ValueError(
                f"diffusers/generate: the image input is not an image ({exc})"
            ) from None
        img = img.convert("RGB")
        if "width" not in args and (width or height):
            w, h = width or img.size[0], height or img.size[1]
            if (w, h) != img.size:
                img = img.resize((w, h), PILImage.Resampling.LANCZOS)
        return img

    @staticmethod
    def _call(pipe: Any, loaded: Loaded, kwargs: dict[str, Any]) -> Any:
        """The pipeline call under inference mode (prompts included); eager again when a
        compiled module fails."""
        import torch
        from inline_sdk import Cancelled

        try:
            with torch.inference_mode():
                return pipe(**kwargs).images[0]
        except Cancelled:
            raise
        except Exception:
            if not loaded.compiled:
                raise
            uncompile(loaded)
            with torch.inference_mode():
                return pipe(**kwargs).images[0]


def _load(
    ctx: Context, model: str, checkpoint: str, width: int, height: int, guidance: float
) -> tuple[Folder, Loaded]:
    """The folder (or checkpoint) picked and its pipeline, loaded and placed (kept loaded)."""
    if checkpoint:
        folder = resolve_checkpoint(ctx.models_dir, checkpoint, model)
    else:
        folder = resolve(ctx.models_dir, model)
    ctx.phase("loading", f"Loading {folder.name}…", 0.0)
    import_diffusers()
    from inline_primitives._runtime import activation_bytes

    guess_w, guess_h = width or 1024, height or 1024
    activation = activation_bytes(guess_w, guess_h, cfg=guidance != 0)
    return folder, PIPELINES.get(folder, ctx.memory, activation)
