"""``inline models fit FILE...``: will these model files run here, and how?"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from inline_core import (
    GIB,
    Budget,
    Estimate,
    Gpu,
    HeaderError,
    Inventory,
    Placement,
    activation_bytes,
    estimate_paths,
    place,
)

from .._settings import Settings
from ..workers._inventory import probe

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


def add_fit_parser(models_sub: Any) -> None:
    """``inline models fit``."""
    p = models_sub.add_parser("fit", help="will these model files run here, and how?")
    p.add_argument("files", nargs="+", type=Path, help="safetensors files or model folders")
    p.add_argument("--vram-gb", type=float, help="pretend each GPU has this much memory")
    p.add_argument("--ram-gb", type=float, help="pretend the machine has this much RAM")
    p.add_argument("--gpus", type=int, help="pretend the machine has this many GPUs (0: none)")
    p.add_argument("--profile", choices=PROFILES, default=Settings.from_env().profile or "gpu-max")
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--height", type=int, default=1024)
    p.add_argument("--json", action="store_true", help="print the answer as JSON")


def run_fit(args: argparse.Namespace) -> int:
    """Print the plan; exit 1 when it won't fit, 2 on unreadable files."""
    try:
        placement, estimate = fit(
            list(args.files),
            inventory_for(args.vram_gb, args.ram_gb, args.gpus),
            profile=args.profile,
            budget=budget_of(Settings.from_env()),
            width=args.width,
            height=args.height,
        )
    except HeaderError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    answer = fit_answer(placement, estimate)
    if args.json:
        print(json.dumps(answer, indent=2))
    else:
        for c in answer["components"]:
            plan = c.get("plan")
            how = (
                f"{plan['device']} {plan['dtype']} {plan['quantization']} {plan['offload']}"
                if plan
                else "-"
            )
            print(
                f"{c['file']}: {c['role']}, {c['params']:,} params, "
                f"{c['bytes'] / GIB:.2f} GiB -> {how}"
            )
        print(("fits: " if placement.fits else "won't fit: ") + placement.reason)
    return 0 if placement.fits else 1
