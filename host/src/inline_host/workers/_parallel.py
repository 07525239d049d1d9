"""The multi-GPU split the broker hands a worker in ``Placed``: which sequence-parallel plan, on
which devices.

``INLINE_PARALLEL`` (``--multi-gpu`` sets ``auto``): unset or ``auto`` splits one image across
every GPU when there is more than one (Ulysses when every GPU has NVLink, ring over PCIe, as the
policy detects with nvidia-ml-py); ``off`` never splits; explicit degrees (``ulysses=2``,
``ring=2``, ``ulysses=2,ring=2``) multiply to the world size and force a group of that many ranks,
on the GPUs when there are enough, else on the CPU (a gloo group: what the tests run).
"""

from __future__ import annotations

import math
from typing import Final

from inline_core import Inventory, Placement

KINDS: Final = ("ulysses", "ring")
OFF: Final = ("off", "none", "0", "false")


def parse_parallel(raw: str | None) -> dict[str, int] | None:
    """The explicit degrees of ``raw`` (``{"ulysses": 2}``), None for ``auto``/unset, ``{}`` for
    off. A malformed value names what is wrong."""
    text = (raw or "").strip().lower()
    if text in ("", "auto"):
        return None
    if text in OFF:
        return {}
    degrees: dict[str, int] = {}
    for part in text.split(","):
        kind, sep, value = part.strip().partition("=")
        if not sep or kind not in KINDS or not value.isdigit() or int(value) < 1:
            raise ValueError(
                f"INLINE_PARALLEL={raw!r}: expected 'auto', 'off' or degrees like 'ulysses=2', "
                f"'ring=2', 'ulysses=2,ring=2' (got {part.strip()!r})"
            )
        if kind in degrees:
            raise ValueError(f"INLINE_PARALLEL={raw!r}: '{kind}' is given twice")
        degrees[kind] = int(value)
    return degrees


def plan_parallel(
    raw: str | None, inventory: Inventory, placement: Placement
) -> tuple[str | None, list[str]]:
    """The plan (``ulysses=2``) and one device per rank for ``placement``; (None, []) alone."""
    degrees = parse_parallel(raw)
    gpus = inventory.gpus if placement.device.startswith("cuda") else ()
    if degrees is None:  # by the hardware
        if len(gpus) < 2 or placement.parallel is None:
            return None, []
        degrees = {placement.parallel: len(gpus)}
    if not degrees:
        return None, []
    world = math.prod(degrees.values())
    if world < 2:
        return None, []
    plan = ",".join(f"{k}={degrees[k]}" for k in KINDS if k in degrees)
    if len(gpus) >= world:
        return plan, [f"cuda:{g.index}" for g in gpus[:world]]
    return plan, ["cpu"] * world
