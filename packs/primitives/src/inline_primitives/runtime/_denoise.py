"""The denoiser seam: one request, and the ``Denoiser`` protocol its implementations share.

``LocalDenoiser`` runs today's loop (``_sampling.sample``) for one request; ``BatchedDenoiser``
(``_batch``) denoises compatible requests of different runs as one batch; ``ParallelDenoiser``
(``_parallel``) runs them in a torchrun worker group. Nodes never pick one: ``denoiser_for`` does,
from the worker's settings and the broker's plan.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from .._sampling import SHIFT
from .._text import Conditioning

StepCallback = Callable[[int, int, Any], None]


@dataclass
class DenoiseRequest:
    """One sample call: its own seed, conditioning, latents, progress and cancellation."""

    positive: Conditioning
    negative: Conditioning | None
    latent: Any
    steps: int
    guidance: float
    sampler: str
    scheduler: str
    seed: int
    denoise: float = 1.0
    shift: float = SHIFT
    #: ``on_step(i, n, latents)`` after each step; raising from it stops this request only.
    on_step: StepCallback | None = None
    #: Whether this request was cancelled (checked before every step).
    cancelled: Callable[[], bool] = field(default=lambda: False)
    #: The LoRA stack its weights need (``_lora.LoraWeights``; applied before its batch runs).
    loras: Any = None

    def use_weights(self) -> None:
        """Put this request's LoRA stack (or none) on the weights before denoising."""
        if self.loras is not None:
            self.loras.apply()

    def start(self) -> int:
        """The first step index (``denoise`` < 1 skips the first steps: img2img)."""
        steps = max(1, int(self.steps))
        return int(max(steps - min(steps * float(self.denoise), steps), 0))

    def key(self) -> tuple[Any, ...]:
        """What must match for two requests to share a batch (the same weights are implied:
        one batcher per loaded transformer)."""
        return (
            tuple(self.latent.shape[1:]),
            max(1, int(self.steps)),
            self.start(),
            self.sampler,
            self.scheduler,
            float(self.guidance),
            float(self.shift),
            self.loras.key if self.loras is not None else (),
        )


class Denoiser(Protocol):
    """Denoises one request's latents and returns the new latents."""

    def denoise(self, request: DenoiseRequest) -> Any: ...


class LocalDenoiser:
    """Today's loop, one request at a time, in the calling thread."""

    def __init__(self, transformer: Any) -> None:
        self.transformer = transformer

    def denoise(self, request: DenoiseRequest) -> Any:
        from inline_sdk import Cancelled

        def on_step(i: int, n: int, x: Any) -> None:
            if request.cancelled():
                raise Cancelled()
            if request.on_step is not None:
                request.on_step(i, n, x)

        from .._loading import execution_device
        from ._attention import attention_on

        request.use_weights()
        with attention_on(self.transformer, execution_device(self.transformer)):
            return self._sample(request, on_step)

    def _sample(self, request: DenoiseRequest, on_step: StepCallback) -> Any:
        from .._sampling import sample

        return sample(
            self.transformer,
            request.positive,
            request.negative,
            request.latent,
            steps=request.steps,
            guidance=request.guidance,
            sampler=request.sampler,
            scheduler=request.scheduler,
            seed=request.seed,
            denoise=request.denoise,
            shift=request.shift,
            on_step=on_step,
        )
