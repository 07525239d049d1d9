"""The multi-GPU split the broker hands a worker in ``Placed``: which sequence-parallel plan, on
which devices.

``INLINE_PARALLEL``: unset or ``auto`` splits one image across every GPU when there is more than
one (Ulysses when every GPU has NVLink, ring over PCIe, as the policy detects with nvidia-ml-py);
``off`` never splits; explicit degrees (``ulysses=2``, ``ring=2``, ``ulysses=2,ring=2``) multiply
to the world size, which must equal the number of GPUs: anything else is refused at start
(``parallel_problem``: one line, exit 2), never run silently on CPU ranks. CPU ranks (a gloo
group: what the tests and ``bench/parallel_cpu.py`` run) only with ``INLINE_PARALLEL_DEVICE=cpu``.
"""

from __future__ import annotations

import math
from typing import Final

from inline_core import Inventory, Placement

KINDS: Final = ("ulysses", "ring")
OFF: Final = ("off", "none", "0", "false")
#: ``INLINE_PARALLEL_DEVICE``: ``cpu`` runs explicit degrees as CPU ranks (gloo)
DEVICES: Final = ("cpu", "cuda")


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
        if kind == "pipefusion":
            raise ValueError(
                f"INLINE_PARALLEL={raw!r}: pipefusion is not available for Z-Image (xfuser "
                "0.7.0's Z-Image runner offers no PipeFusion, only the sequence split): split "
                "the sequence with ulysses=N or ring=N instead"
            )
        if not sep or kind not in KINDS or not value.isdigit() or int(value) < 1:
            raise ValueError(
                f"INLINE_PARALLEL={raw!r}: expected 'auto', 'off' or degrees like 'ulysses=2', "
                f"'ring=2', 'ulysses=2,ring=2' (got {part.strip()!r})"
            )
        if kind in degrees:
            raise ValueError(f"INLINE_PARALLEL={raw!r}: '{kind}' is given twice")
        degrees[kind] = int(value)
    return degrees


def parallel_problem(
    raw: str | None, inventory: Inventory, device: str | None = None
) -> str | None:
    """Why ``INLINE_PARALLEL`` (and ``INLINE_PARALLEL_DEVICE``) cannot run on this machine, as
    one line; None when they can."""
    try:
        degrees = parse_parallel(raw)
    except ValueError as exc:
        return str(exc)
    where = (device or "").strip().lower()
    if where and where not in DEVICES:
        return f"INLINE_PARALLEL_DEVICE={device!r}: expected 'cpu' (CPU ranks on gloo) or 'cuda'"
    if not degrees:  # auto or off: whatever the hardware has
        return None
    world = math.prod(degrees.values())
    if where == "cpu" and degrees.get("ring", 1) > 1:
        return (
            f"INLINE_PARALLEL={raw}: ring attention is not built for CPU ranks (it needs a CUDA "
            f"attention kernel): use ulysses={world}"
        )
    if where == "cpu" or world < 2:
        return None
    gpus = len(inventory.gpus)
    if gpus != world:
        return (
            f"INLINE_PARALLEL={raw}: {world} ranks need {world} GPUs and this machine has {gpus} "
            "(degrees must equal the number of GPUs; INLINE_PARALLEL_DEVICE=cpu runs them as "
            "CPU ranks)"
        )
    return None


def plan_parallel(
    raw: str | None, inventory: Inventory, placement: Placement, device: str | None = None
) -> tuple[str | None, list[str]]:
    """The plan (``ulysses=2``) and one device per rank for ``placement``; (None, []) alone.
    Explicit degrees run on the GPUs, or as CPU ranks with ``device`` ``cpu``."""
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
    if (device or "").strip().lower() == "cpu":
        return plan, ["cpu"] * world
    if len(gpus) == world:
        return plan, [f"cuda:{g.index}" for g in gpus]
    return None, []  # refused at start (parallel_problem); a model placed off the GPUs: alone
