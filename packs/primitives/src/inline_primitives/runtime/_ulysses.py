"""Sequence parallelism for the Z-Image transformer on a ``torch.distributed`` group: each rank
computes 1/N of the tokens of every block, and attention swaps sequence for heads around itself
(Ulysses: an all-to-all of heads, the whole sequence for 1/N of the heads, an all-to-all back).

The collectives are diffusers' context parallelism (``ContextParallelConfig``, its Ulysses
attention and its split / gather hooks), on whatever backend the group has: gloo on CPU ranks
(what the tests and ``bench/parallel_cpu.py`` run, the oracle), NCCL on CUDA ranks. diffusers
ships no plan for Z-Image, so this module places its hooks: each refiner stage and the main
layers split their input sequence (and its rotary table) at their first block, the refiners
gather at their last block (the unified sequence is built from the whole image and caption),
and the main layers stay split until the final layer, whose output is gathered.

Heads that do not divide by the Ulysses degree (Z-Image has 30: 4 or 8 ranks) take diffusers'
"Ulysses anything" (uneven heads and tokens per rank), said once in the log. Ring attention
needs an attention kernel that returns the log-sum-exp, which diffusers has only on CUDA: CPU
ranks refuse ``ring=N`` with one line (``SplitRefused``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Final

log = logging.getLogger("inline.runtime.ulysses")

#: The Z-Image block lists, in the order the transformer runs them.
STAGES: Final = ("noise_refiner", "context_refiner", "layers")
#: The hook names this module registers (diffusers' ``HookRegistry``).
SPLIT_HOOK: Final = "inline-sequence-split"
GATHER_HOOK: Final = "inline-sequence-gather"
#: diffusers' ring attention needs a kernel that returns the log-sum-exp: cuDNN's SDPA.
RING_BACKEND: Final = "_native_cudnn"


class SplitRefused(ValueError):
    """A plan this machine cannot split by (ring on CPU ranks, uneven heads with ring)."""


@dataclass(frozen=True)
class SplitPlan:
    """The degrees one group splits by, for one transformer."""

    ulysses: int
    ring: int
    #: heads (or tokens) that do not divide by ``ulysses``: uneven shares per rank
    uneven: bool


def parse_degrees(plan: str) -> dict[str, int]:
    """``ulysses=2,ring=2`` as ``{"ulysses": 2, "ring": 2}``."""
    out: dict[str, int] = {}
    for part in plan.split(","):
        kind, _, value = part.partition("=")
        out[kind.strip()] = int(value)
    return out


def check_devices(plan: str, device_type: str) -> None:
    """Refuse ``ring`` on ranks that are not CUDA devices, naming the plan that runs there."""
    d = parse_degrees(plan)
    ulysses, ring = d.get("ulysses", 1), d.get("ring", 1)
    if ring > 1 and device_type != "cuda":
        raise SplitRefused(
            f"INLINE_PARALLEL={plan}: ring attention is not built for CPU ranks (diffusers' ring "
            "needs an attention kernel that returns the log-sum-exp, CUDA only): use "
            f"ulysses={ulysses * ring}"
        )


def split_plan(plan: str, heads: int, device_type: str) -> SplitPlan:
    """How ``plan`` splits a transformer of ``heads`` heads on ``device_type`` ranks; refused
    with the reason and the fix where it cannot."""
    check_devices(plan, device_type)
    d = parse_degrees(plan)
    ulysses, ring = d.get("ulysses", 1), d.get("ring", 1)
    uneven = ulysses > 1 and heads % ulysses != 0
    if uneven and ring > 1:
        raise SplitRefused(
            f"INLINE_PARALLEL={plan}: the transformer's {heads} heads do not divide by "
            f"ulysses={ulysses}, and uneven heads cannot combine with ring: use ulysses="
            f"{ulysses * ring} alone, or a ulysses degree that divides {heads}"
        )
    if uneven:
        log.info(
            "the transformer's %d heads do not divide by ulysses=%d: uneven heads per rank "
            "(diffusers' Ulysses anything)",
            heads,
            ulysses,
        )
    return SplitPlan(ulysses, ring, uneven)


@dataclass
class TokenProbe:
    """What this rank's attention saw in the last call, per stage: ``[tokens this rank's
    attention saw, tokens of the whole sequence]`` (forward pre-hooks: they see a block's
    arguments before diffusers' split hook does, and the attention's after)."""

    seen: dict[str, list[int]] = field(default_factory=dict)

    def install(self, module: Any) -> None:
        for stage in STAGES:
            blocks = getattr(module, stage)
            if not len(blocks):
                continue
            blocks[0].register_forward_pre_hook(self._full_hook(stage))
            blocks[0].attention.register_forward_pre_hook(self._seen_hook(stage))

    def _full_hook(self, stage: str) -> Any:
        def hook(_module: Any, args: tuple[Any, ...]) -> None:
            self.seen.setdefault(stage, [0, 0])[1] = int(args[0].shape[1])

        return hook

    def _seen_hook(self, stage: str) -> Any:
        def hook(_module: Any, args: tuple[Any, ...]) -> None:
            self.seen.setdefault(stage, [0, 0])[0] = int(args[0].shape[1])

        return hook

    def take(self) -> dict[str, list[int]]:
        """The last call's lengths, cleared for the next."""
        out, self.seen = self.seen, {}
        return out


def each_rank_split(per_rank: list[dict[str, list[int]]]) -> bool:
    """Whether every stage's sequence was shared out: each rank's attention saw fewer tokens than
    the whole, and the ranks' shares add up to it."""
    if not per_rank or not all(per_rank):
        return False
    for stage in per_rank[0]:
        full = per_rank[0][stage][1]
        shares = [r.get(stage, [0, 0])[0] for r in per_rank]
        if full < 2 or sum(shares) != full or max(shares) >= full:
            return False
    return True


def heads_of(module: Any) -> int:
    """The attention heads of a Z-Image transformer."""
    return int(module.layers[0].attention.heads)


def enable_sequence_split(module: Any, plan: str, device: Any) -> SplitPlan:
    """Put the split on ``module`` (a diffusers ``ZImageTransformer2DModel``) for the default
    process group, which must hold exactly the plan's ranks."""
    import torch.distributed as dist
    from diffusers.hooks import HookRegistry
    from diffusers.hooks.context_parallel import (
        ContextParallelGatherHook,
        ContextParallelSplitHook,
    )
    from diffusers.models._modeling_parallel import (
        ContextParallelConfig,
        ContextParallelInput,
        ContextParallelOutput,
        ParallelConfig,
    )
    from torch.distributed.device_mesh import init_device_mesh

    chosen = split_plan(plan, heads_of(module), device.type)
    cp = ContextParallelConfig(
        ring_degree=chosen.ring, ulysses_degree=chosen.ulysses, ulysses_anything=chosen.uneven
    )
    config = ParallelConfig(context_parallel_config=cp)
    # diffusers' enable_parallelism derives the device from the accelerator count (none on a
    # CPU machine): the mesh and the config are built here, on the group's own device
    mesh = init_device_mesh(device.type, cp.mesh_shape, mesh_dim_names=cp.mesh_dim_names)
    config.setup(dist.get_rank(), dist.get_world_size(), device, mesh=mesh)
    module._parallel_config = config
    if chosen.ring > 1:
        module.set_attention_backend(RING_BACKEND)
    for sub in module.modules():
        processor = getattr(sub, "processor", None)
        if processor is not None and hasattr(processor, "_parallel_config"):
            processor._parallel_config = config

    def hook(target: Any, made: Any, name: str) -> None:
        HookRegistry.check_if_exists_or_initialize(target).register_hook(made, name)

    gather = [ContextParallelOutput(gather_dim=1, expected_dims=3)]
    for stage in STAGES:
        blocks = list(getattr(module, stage))
        for i, block in enumerate(blocks):
            inputs: dict[str | int, Any] = {
                "freqs_cis": ContextParallelInput(split_dim=1, expected_dims=3)
            }
            if i == 0:
                inputs["x"] = ContextParallelInput(split_dim=1, expected_dims=3)
            hook(block, ContextParallelSplitHook(inputs, cp), SPLIT_HOOK)
        if stage != "layers" and blocks:
            hook(blocks[-1], ContextParallelGatherHook(gather, cp), GATHER_HOOK)
    for final in module.all_final_layer.values():
        hook(final, ContextParallelGatherHook(gather, cp), GATHER_HOOK)
    return chosen
