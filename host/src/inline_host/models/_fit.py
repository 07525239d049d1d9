"""Will these model files run here, and how: the placement of a model set on an inventory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inline_core import (
    GIB,
    Budget,
    Estimate,
    Gpu,
    Inventory,
    Placement,
    activation_bytes,
    estimate_paths,
    place,
)

from .._settings import Settings
from ..workers import probe

PROFILES = ("gpu-max", "lowvram", "cpu")


def inventory_for(vram_gb: float | None, ram_gb: float | None, gpus: int | None) -> Inventory:
    """This machine's inventory, with any of its numbers overridden (to ask "what if")."""
    real = probe()
    ram = int(ram_gb * GIB) if ram_gb is not None else real.ram_total_bytes
    if vram_gb is None and gpus is None:
        return Inventory(ram_total_bytes=ram, ram_free_bytes=ram, gpus=real.gpus)
    count = gpus if gpus is not None else max(1, len(real.gpus))
    size = (
        int(vram_gb * GIB)
        if vram_gb is not None
        else (real.gpus[0].total_bytes if real.gpus else 0)
    )
    fake = (
        tuple(
            Gpu(index=i, name=f"GPU {i}", total_bytes=size, free_bytes=size) for i in range(count)
        )
        if size
        else ()
    )
    return Inventory(ram_total_bytes=ram, ram_free_bytes=ram, gpus=fake)


def budget_of(settings: Settings) -> Budget:
    """``INLINE_VRAM_BUDGET_GB`` (and ``INLINE_RAM_BUDGET_GB``, the system-RAM share the engine
    may use, for tests and shared machines) as a budget."""
    vram, ram = settings.vram_budget_gb, settings.ram_budget_gb
    return Budget(
        vram_bytes=int(vram * GIB) if vram is not None else None,
        ram_bytes=int(ram * GIB) if ram is not None else None,
    )


def fit_answer(placement: Placement, estimate: Estimate) -> dict[str, Any]:
    """The JSON answer: ``fits``, ``components`` with their ``plan``, ``reason`` (+ numbers)."""
    plans = {p.name: p for p in placement.components}
    components = []
    for c in estimate.components:
        item: dict[str, Any] = {
            "file": c.name,
            "role": c.role,
            "params": c.params,
            "bytes": c.bytes,
        }
        plan = plans.get(c.name)
        if plan is not None:
            item["plan"] = {
                "device": plan.device,
                "dtype": plan.dtype,
                "quantization": plan.quantization,
                "offload": plan.offload,
            }
        components.append(item)
    return {
        "fits": placement.fits,
        "components": components,
        "reason": placement.reason,
        "device": placement.device,
        "parallel": placement.parallel,
        "parkTextEncoder": placement.park_text_encoder,
        "vaeTiling": placement.vae_tiling,
        "vramBudgetBytes": placement.vram_budget_bytes,
        "peakVramBytes": placement.peak_vram_bytes,
        "ramBytes": placement.ram_bytes,
    }


def fit(
    paths: list[Path],
    inventory: Inventory,
    *,
    profile: str = "gpu-max",
    budget: Budget | None = None,
    width: int = 1024,
    height: int = 1024,
) -> tuple[Placement, Estimate]:
    """Estimate ``paths`` from their headers and place them."""
    components = tuple(estimate_paths(paths))
    dtype_bytes = 4 if not inventory.gpus or profile == "cpu" else 2
    estimate = Estimate(components, activation_bytes(width, height, dtype_bytes=dtype_bytes))
    return place(inventory, estimate, profile, budget), estimate  # type: ignore[arg-type]
