"""``inline models fit FILE...``: will these model files run here, and how?"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from inline_core import GIB, HeaderError

from .._settings import Settings
from ..models import PROFILES, budget_of, fit, fit_answer, inventory_for


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
