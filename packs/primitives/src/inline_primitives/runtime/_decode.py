"""VAE decode gathered like the denoise: concurrent decodes of the same VAE and latent shape run
as one batch (the VAE's ops are per image, so each image equals its decode alone)."""

from __future__ import annotations

import threading
from typing import Any

from inline_sdk import Context

from .._images import decode
from ._gather import BatchStats, Gatherer, Job
from ._settings import batch_window_s, max_batch

LOCK_KEY = "inline_primitives.decoders"
ATTR = "_inline_decoder"


def _gatherer(ctx: Context, vae: Any) -> Gatherer[Any]:
    def run_batch(jobs: list[Job[Any]]) -> None:
        import torch

        images = decode(vae, torch.cat([j.request for j in jobs]))
        row = 0
        for job in jobs:
            n = job.request.shape[0]
            job.succeed(images[row : row + n])
            row += n

    def report(s: BatchStats) -> None:
        ctx.stats.update("decodeBatching", s.as_dict())

    return Gatherer(
        run_batch,
        lambda latents: decode(vae, latents),
        key=lambda latents: tuple(latents.shape[1:]),
        limit=lambda _latents: max_batch(),
        window_s=batch_window_s(),
        on_batch=report,
    )


def decode_batched(ctx: Context, vae: Any, latents: Any) -> list[Any]:
    """``decode``, batched with concurrent decodes of this worker (``INLINE_MAX_BATCH`` > 1)."""
    if max_batch() <= 1:
        return decode(vae, latents)
    with ctx.cache.get(LOCK_KEY, threading.Lock):  # kept on the VAE: it goes when the VAE does
        gatherer = getattr(vae, ATTR, None)
        if gatherer is None:
            gatherer = _gatherer(ctx, vae)
            setattr(vae, ATTR, gatherer)
    return gatherer.submit(latents)
