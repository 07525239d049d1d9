"""VAE decode gathered like the denoise: concurrent decodes of the same VAE and latent shape run
as one batch (the VAE's ops are per image, so each image equals its decode alone)."""

from __future__ import annotations

import threading
import weakref
from typing import Any

from inline_sdk import Context

from .._images import decode
from ._gather import BatchStats, Gatherer, Job
from ._settings import batch_window_s, max_batch

CACHE_KEY = "inline_primitives.decoders"


class _Decoders:
    def __init__(self) -> None:
        self.by_vae: weakref.WeakKeyDictionary[Any, Gatherer[Any]] = weakref.WeakKeyDictionary()
        self.lock = threading.Lock()


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
    table = ctx.cache.get(CACHE_KEY, _Decoders)
    with table.lock:
        gatherer = table.by_vae.get(vae)
        if gatherer is None:
            gatherer = table.by_vae[vae] = _gatherer(ctx, vae)
    return gatherer.submit(latents)
