"""Which denoiser a call gets, kept per loaded transformer in the worker's cache (``ctx.cache``).

A transformer the broker planned across several devices (``Placed.parallel``) gets the
``ParallelDenoiser`` (a torchrun worker group); otherwise the ``BatchedDenoiser`` when
``INLINE_MAX_BATCH`` > 1, else the ``LocalDenoiser``. Compile (``_compile``) wraps the
transformer underneath whichever it is.
"""

from __future__ import annotations

import threading
from typing import Any

from inline_sdk import Context

from .._text import Conditioning
from ._compile import CompiledTransformer, compile_mode
from ._denoise import Denoiser, DenoiseRequest, LocalDenoiser
from ._settings import max_batch

LOCK_KEY = "inline_primitives.denoisers"
ATTR = "_inline_denoiser"
PREVIEW_EVERY = 4


def _make(ctx: Context, transformer: Any, model_file: str | None) -> Denoiser:
    from .._loading import execution_device

    parallel = getattr(transformer, "_inline_parallel", None)
    if parallel:
        from ._parallel import ParallelDenoiser

        return ParallelDenoiser(
            model_file or "",
            parallel[0],
            list(parallel[1]),
            ctx.stats,
            attention=str(getattr(transformer, "_inline_attention", "sdpa")),
        )
    mode = compile_mode(execution_device(transformer), model_file)
    model: Any = transformer
    if mode != "eager":
        model = CompiledTransformer(transformer, mode, ctx.stats)
    if max_batch() > 1:
        from ._batch import BatchedDenoiser

        return BatchedDenoiser(model, stats=ctx.stats)
    return LocalDenoiser(model)


def denoiser_for(ctx: Context, transformer: Any, model_file: str | None = None) -> Denoiser:
    """The worker's denoiser for ``transformer``, made once per loaded transformer and kept on
    it: it goes when the model does (the worker's model cache, ``ctx.cache``, drops it; a table
    keyed by the model would keep it alive through the denoiser's own reference)."""
    with ctx.cache.get(LOCK_KEY, threading.Lock):
        found = getattr(transformer, ATTR, None)
        if found is None:
            found = _make(ctx, transformer, model_file)
            setattr(transformer, ATTR, found)
        return found


def denoise(
    ctx: Context,
    transformer: Any,
    positive: Conditioning,
    negative: Conditioning | None,
    latents: Any,
    *,
    model_file: str | None = None,
    **options: Any,
) -> Any:
    """One sample call through the worker's denoiser: a progress event every step, a preview
    every few steps, cancellation at step granularity (this call only)."""
    from .._sampling import preview_png

    def on_step(i: int, n: int, x: Any) -> None:
        ctx.progress(i, n, phase="sample", status=f"Step {i}/{n}")
        every = max(1, min(PREVIEW_EVERY, n // 2))
        if i < n and i % every == 0:
            ctx.preview(preview_png(x))

    ctx.check_cancelled()
    request = DenoiseRequest(
        positive=positive,
        negative=negative,
        latent=latents,
        on_step=on_step,
        cancelled=lambda: ctx.cancelled,
        **options,
    )
    return denoiser_for(ctx, transformer, model_file).denoise(request)
