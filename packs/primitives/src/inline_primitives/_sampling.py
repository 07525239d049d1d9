"""The flow-matching sampler: Z-Image's Euler schedule with shift 3, on diffusers' own scheduler.

The loop is ``ZImagePipeline.__call__``'s, step for step (same noise, sigmas, timestep
convention, guidance and scheduler step), so a render matches a direct pipeline call; around it
sit what a node needs: ``denoise`` (img2img), per-step progress, previews and cancellation.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

from ._text import Conditioning

log = logging.getLogger("inline.primitives.sampling")

SHIFT: Final = 3.0
#: Samplers with their own step rule here; the rest run the Euler loop (as the reference does).
STEP_RULES: Final = {"euler": {}, "euler_a": {"stochastic_sampling": True}}
SIGMA_SCHEDULES: Final = {
    "simple": {},
    "karras": {"use_karras_sigmas": True},
    "exponential": {"use_exponential_sigmas": True},
    "beta": {"use_beta_sigmas": True},
}

StepCallback = Callable[[int, int, Any], None]


def make_scheduler(sampler: str, scheduler: str, shift: float = SHIFT) -> Any:
    """diffusers' ``FlowMatchEulerDiscreteScheduler`` as Z-Image configures it, plus the
    sampler's step rule and the sigma schedule's conversion."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    if sampler not in STEP_RULES:
        log.info("sampler '%s' runs the Euler flow-matching loop", sampler)
    if scheduler not in SIGMA_SCHEDULES:
        log.info("scheduler '%s' is not known: using 'simple'", scheduler)
    return FlowMatchEulerDiscreteScheduler(
        num_train_timesteps=1000,
        shift=float(shift),
        use_dynamic_shifting=False,
        **STEP_RULES.get(sampler, {}),
        **SIGMA_SCHEDULES.get(scheduler, {}),
    )


def make_noise(shape: tuple[int, ...], seed: int, device: Any) -> Any:
    """Gaussian noise from a CPU generator seeded with ``seed`` (the same on every device, and the
    same as diffusers' ``randn_tensor`` with a CPU generator)."""
    import torch

    gen = torch.Generator("cpu").manual_seed(int(seed))
    return torch.randn(shape, generator=gen, dtype=torch.float32).to(device)


def sample(
    transformer: Any,
    positive: Conditioning,
    negative: Conditioning | None,
    latent: Any,
    *,
    steps: int,
    guidance: float,
    sampler: str,
    scheduler: str,
    seed: int,
    denoise: float = 1.0,
    shift: float = SHIFT,
    on_step: StepCallback | None = None,
) -> Any:
    """Denoise ``latent`` (B, C, H, W; zeros for text-to-image) and return the new latents.

    ``guidance`` is diffusers' (0 = off; ``pos + g * (pos - neg)``). ``denoise`` < 1 starts from
    ``latent`` noised to the matching sigma (img2img), running the last ``steps * denoise`` steps.
    ``on_step(i, n, latents)`` runs after each step; raising from it stops the loop.
    """
    import torch

    from ._loading import execution_device

    steps = max(1, int(steps))
    device = execution_device(transformer)
    dtype = transformer.dtype
    sched = make_scheduler(sampler, scheduler, shift)
    gen = torch.Generator("cpu").manual_seed(int(seed))
    latent = latent.to(device=device, dtype=torch.float32)
    noise = torch.randn(latent.shape, generator=gen, dtype=torch.float32).to(device)
    sigmas = torch.linspace(1.0, 1 / steps, steps).tolist()
    sched.set_timesteps(sigmas=sigmas, device=device)
    init = min(steps * float(denoise), steps)
    start = int(max(steps - init, 0))
    timesteps = sched.timesteps[start:]
    sched.set_begin_index(start)
    if len(timesteps) == 0:
        return latent
    if start == 0 and not bool(latent.any()):
        x = noise
    else:
        sigma = sched.sigmas[start]
        x = sigma * noise + (1.0 - sigma) * latent

    batch = x.shape[0]
    pos = _per_item(positive.embeds, batch, device, dtype)
    neg = None
    if guidance > 0:
        neg = _per_item((negative or positive.zeroed()).embeds, batch, device, dtype)
    total = len(timesteps)
    with torch.no_grad():
        for i, t in enumerate(timesteps):
            timestep = (1000 - t.expand(batch)) / 1000
            if neg is not None:
                model_in = x.to(dtype).repeat(2, 1, 1, 1)
                caps = pos + neg
                ts = timestep.repeat(2)
            else:
                model_in = x.to(dtype)
                caps = pos
                ts = timestep
            out = transformer(
                list(model_in.unsqueeze(2).unbind(dim=0)), ts, caps, return_dict=False
            )[0]
            if neg is not None:
                pred = torch.stack(
                    [
                        out[j].float() + guidance * (out[j].float() - out[batch + j].float())
                        for j in range(batch)
                    ]
                )
            else:
                pred = torch.stack([o.float() for o in out])
            pred = -pred.squeeze(2)
            x = sched.step(pred.to(torch.float32), t, x, return_dict=False, generator=gen)[0]
            if on_step is not None:
                on_step(i + 1, total, x)
    return x


def _per_item(embeds: list[Any], batch: int, device: Any, dtype: Any) -> list[Any]:
    items = [e.to(device=device, dtype=dtype) for e in embeds]
    if len(items) == batch:
        return items
    if len(items) == 1:
        return items * batch
    raise ValueError(f"{len(items)} prompts for a batch of {batch} latents")


def preview_png(latents: Any, size: int = 256) -> bytes:
    """A small preview of latents: three channel groups as RGB, scaled to ``size`` at most."""
    import io

    import torch
    from PIL import Image

    with torch.no_grad():
        x = latents[0].float().cpu()
        groups = torch.tensor_split(x, 3, dim=0)
        rgb = torch.stack([g.mean(dim=0) for g in groups])
        lo, hi = rgb.amin(), rgb.amax()
        rgb = ((rgb - lo) / (hi - lo + 1e-6) * 255).round().clamp(0, 255).to(torch.uint8)
    img = Image.fromarray(rgb.permute(1, 2, 0).numpy(), "RGB")
    img.thumbnail((size, size))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()
