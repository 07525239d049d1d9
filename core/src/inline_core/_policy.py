"""The device and memory policy: one pure function decides where and how a model runs.

``place(inventory, estimate, profile, budget) -> Placement``. Nodes never pick a device; workers
apply what this returns. Auto-fit order, first that fits wins:

1. full precision (bf16, or fp16 on GPUs without bf16), everything resident on the GPU;
2. int8 weight-only, everything resident;
3. CPU offload: whole components moved in when used (``model``), then layer-by-layer streaming
   (``sequential``), full precision before int8 (int8 shrinks what system RAM must hold).

On the CPU alone: fp32 if system RAM holds it, else int8. A model larger than VRAM + RAM can hold
is refused before anything loads, with the sizes named.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

Profile = Literal["gpu-max", "lowvram", "cpu"]
Role = Literal["diffusion", "text-encoder", "vae", "other"]
Offload = Literal["resident", "model", "sequential"]
Quantization = Literal["none", "int8"]

GIB: Final = 1 << 30
MIB: Final = 1 << 20
#: Kept free on every GPU for the CUDA context, allocator slack and offload buffers.
GPU_RESERVE: Final = 768 * MIB
#: Share of system RAM the engine plans to use (the OS and other processes keep the rest).
RAM_SHARE: Final = 0.85
#: Weight bytes per parameter by dtype name.
DTYPE_BYTES: Final = {"fp32": 4, "bf16": 2, "fp16": 2, "int8": 1}
#: The largest single layer streamed at once in sequential offload, as a share of the model.
STREAM_SHARE: Final = 0.05


@dataclass(frozen=True, slots=True)
class Gpu:
    """One accelerator as the host probed it (nvidia-ml-py), without torch."""

    index: int
    name: str
    total_bytes: int
    free_bytes: int
    bf16: bool = True
    nvlink: bool = False


@dataclass(frozen=True, slots=True)
class Inventory:
    """What this machine has."""

    ram_total_bytes: int
    ram_free_bytes: int
    gpus: tuple[Gpu, ...] = ()


@dataclass(frozen=True, slots=True)
class Component:
    """One model file or folder: its role, parameter count and bytes on disk."""

    name: str
    role: Role
    params: int
    bytes: int


@dataclass(frozen=True, slots=True)
class Estimate:
    """What a render needs: its components and its activation memory."""

    components: tuple[Component, ...]
    activation_bytes: int = 0


@dataclass(frozen=True, slots=True)
class Budget:
    """Overrides of what the policy may use (``INLINE_VRAM_BUDGET_GB`` and friends)."""

    vram_bytes: int | None = None
    ram_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class ComponentPlan:
    """How one component is placed."""

    name: str
    role: Role
    params: int
    bytes: int
    device: str
    dtype: str
    quantization: Quantization
    offload: Offload


@dataclass(frozen=True, slots=True)
class Placement:
    """The policy's answer."""

    fits: bool
    device: str
    dtype: str
    components: tuple[ComponentPlan, ...]
    reason: str
    #: The SDPA kernel the packs that run attention use: ``flash`` (CUDA, bf16/fp16),
    #: ``efficient`` (CUDA, fp32), ``math``, or ``sdpa`` (torch picks: the CPU's).
    attention: str = "sdpa"
    vae_tiling: bool = False
    park_text_encoder: bool = False
    parallel: str | None = None
    vram_budget_bytes: int | None = None
    peak_vram_bytes: int = 0
    ram_bytes: int = 0
    notes: tuple[str, ...] = field(default=())


def cuda_attention(dtype: str) -> str:
    """The SDPA kernel for a CUDA placement in ``dtype``: flash attention takes only half
    precision; fp32 gets the memory-efficient kernel."""
    return "flash" if dtype in ("bf16", "fp16") else "efficient"


def activation_bytes(
    width: int, height: int, *, batch: int = 1, dtype_bytes: int = 2, cfg: bool = False
) -> int:
    """ComfyUI's activation estimate for this family: B x H/8 x W/8 x dtype x 0.028 MiB
    (~918 MiB per 1024x1024 bf16 image; doubled with classifier-free guidance)."""
    mib = batch * (height // 8) * (width // 8) * dtype_bytes * 0.01 * 2.8
    return int(mib * MIB * (2 if cfg else 1))


def _gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"


def _weights(c: Component, dtype: str, quant: Quantization) -> int:
    per = DTYPE_BYTES["int8" if quant == "int8" and c.role != "vae" else dtype]
    return c.params * per


def place(
    inventory: Inventory,
    estimate: Estimate,
    profile: Profile = "gpu-max",
    budget: Budget | None = None,
) -> Placement:
    """Decide device, dtype, quantization, offload and the rest for ``estimate``."""
    budget = budget or Budget()
    ram = (
        budget.ram_bytes
        if budget.ram_bytes is not None
        else int(inventory.ram_total_bytes * RAM_SHARE)
    )
    gpus = inventory.gpus if profile != "cpu" else ()
    if not gpus:
        return _place_cpu(estimate, ram)
    gpu = min(gpus, key=lambda g: g.total_bytes)  # sequence parallelism replicates weights
    vram = budget.vram_bytes if budget.vram_bytes is not None else gpu.total_bytes
    vram = max(0, vram - GPU_RESERVE)
    dtype = "bf16" if gpu.bf16 else "fp16"
    act = estimate.activation_bytes
    parallel = None
    if len(gpus) > 1:
        parallel = "ulysses" if all(g.nvlink for g in gpus) else "ring"

    steps: list[tuple[Quantization, Offload]] = [
        ("none", "resident"),
        ("int8", "resident"),
        ("none", "model"),
        ("int8", "model"),
        ("none", "sequential"),
        ("int8", "sequential"),
    ]
    if profile == "lowvram":
        steps = [s for s in steps if s[1] != "resident"]
    for quant, offload in steps:
        sizes = {c.name: _weights(c, dtype, quant) for c in estimate.components}
        total = sum(sizes.values())
        if offload == "resident":
            # everything at once: a text encoder parked on the CPU between encodes comes back to
            # the GPU beside the resident transformer to encode, so parking lowers no peak
            # (measured on an H200: a 16 GB plan that parked peaked at 20.9 GB)
            if total + act > vram:
                continue
            peak, park, need_ram = total + act, False, 0
        elif offload == "model":
            peak, park, need_ram = max(sizes.values(), default=0) + act, True, total
            if peak > vram or need_ram > ram:
                continue
        else:
            peak, park, need_ram = (
                int(max(sizes.values(), default=0) * STREAM_SHARE) + act,
                True,
                total,
            )
            if peak > vram or need_ram > ram:
                continue
        plans = _plans(estimate, sizes, "cuda", dtype, quant, offload)
        how = {
            "resident": "resident on the GPU",
            "model": "with model CPU offload",
            "sequential": "streamed layer by layer from system RAM",
        }[offload]
        reason = (
            f"{_gib(total)} of {dtype}{' int8' if quant == 'int8' else ''} weights "
            f"{how}; peak {_gib(peak)} of a {_gib(vram)} VRAM budget"
        )
        return Placement(
            fits=True,
            device="cuda",
            dtype=dtype,
            components=plans,
            reason=reason,
            attention=cuda_attention(dtype),
            vae_tiling=act > 2 * GIB or offload != "resident",
            park_text_encoder=park,
            parallel=parallel,
            vram_budget_bytes=vram,
            peak_vram_bytes=peak,
            ram_bytes=need_ram,
        )
    need = sum(_weights(c, dtype, "int8") for c in estimate.components)
    return _refuse(estimate, "cuda", dtype, need + act, vram, ram)


def _plans(
    estimate: Estimate,
    sizes: dict[str, int],
    device: str,
    dtype: str,
    quant: Quantization,
    offload: Offload,
) -> tuple[ComponentPlan, ...]:
    """Every component's plan (the VAE is never quantized: it is small and precision-sensitive)."""
    return tuple(
        ComponentPlan(
            c.name,
            c.role,
            c.params,
            sizes[c.name],
            device,
            dtype,
            "int8" if quant == "int8" and c.role != "vae" else "none",
            offload,
        )
        for c in estimate.components
    )


def _place_cpu(estimate: Estimate, ram: int) -> Placement:
    act = estimate.activation_bytes
    dtype = "fp32"
    quants: tuple[Quantization, ...] = ("none", "int8")
    for quant in quants:
        sizes = {c.name: _weights(c, dtype, quant) for c in estimate.components}
        total = sum(sizes.values())
        if total + act <= ram:
            plans = _plans(estimate, sizes, "cpu", dtype, quant, "resident")
            label = "int8 weight-only" if quant == "int8" else dtype
            return Placement(
                fits=True,
                device="cpu",
                dtype=dtype,
                components=plans,
                reason=f"{_gib(total)} of {label} weights in system RAM ({_gib(ram)} usable)",
                vae_tiling=act > 2 * GIB,
                ram_bytes=total + act,
            )
    need = sum(_weights(c, "fp32", "int8") for c in estimate.components)
    return _refuse(estimate, "cpu", "fp32", need + act, 0, ram)


def _refuse(
    estimate: Estimate, device: str, dtype: str, need: int, vram: int, ram: int
) -> Placement:
    names = ", ".join(f"{c.name} ({_gib(c.bytes)})" for c in estimate.components)
    reason = (
        f"Won't fit: even int8 needs {_gib(need)} but this machine offers "
        f"{_gib(vram)} of VRAM and {_gib(ram)} of system RAM. Components: {names}"
    )
    return Placement(fits=False, device=device, dtype=dtype, components=(), reason=reason)
