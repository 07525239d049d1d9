"""What a converted ComfyUI output carries while the Inline graph is built."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Edge:
    """An Inline output: ``{"from": node, "output": port}``."""

    node: str
    port: str


@dataclass(frozen=True, slots=True)
class ModelValue:
    """A diffusion model on its way to a sampler, with what ComfyUI patched onto it: the
    sampling ``shift`` (``ModelSamplingAuraFlow``) and the last ``load/lora`` of its stack."""

    edge: Edge
    shift: float | None = None
    lora: Edge | None = None


@dataclass(frozen=True, slots=True)
class ZeroConditioning:
    """``ConditioningZeroOut``: the empty negative (``sample`` without a negative)."""


@dataclass(frozen=True, slots=True)
class SamplerChoice:
    """``KSamplerSelect``: a sampler name for ``SamplerCustom``."""

    name: str


@dataclass(frozen=True, slots=True)
class Sigmas:
    """A sigma schedule for ``SamplerCustom`` (``KarrasScheduler``, ``BasicScheduler``)."""

    steps: int
    scheduler: str
    denoise: float = 1.0


Value = Edge | ModelValue | ZeroConditioning | SamplerChoice | Sigmas
