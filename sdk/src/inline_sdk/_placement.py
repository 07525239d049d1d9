"""Where a model goes when no broker answers: one rule for every pack.

The host's policy owns placement: a node asks ``ctx.memory.place(...)`` before it loads. Without
a broker (an old host, a library used outside a worker) ``place`` returns ``None``, and the node
falls back to ``local_placement``: ``INLINE_DEVICE`` when set (``INLINE_PROFILE=cpu`` keeps it
on the CPU), else CUDA when torch sees one; bf16 on CUDA (fp16 where the card has no bf16), fp32
on the CPU (bf16 is several times slower there), keeping the file's dtype for models too big to
double. torch is imported only here, only when called: packs that place models have it.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any, Final

#: Over this many bytes a model on the CPU keeps its file's dtype instead of widening to fp32.
CPU_FP32_MAX: Final = 4 * 1024**3


@dataclass(frozen=True, slots=True)
class LocalPlacement:
    """The device and dtype (a torch dtype's name; None: keep the file's) of a model placed
    without a broker."""

    device: str
    dtype: str | None


def _cuda() -> tuple[bool, bool]:
    """(CUDA present, bf16 supported), as torch sees them (no torch: neither)."""
    try:
        torch: Any = importlib.import_module("torch")
    except ImportError:
        return False, False
    if not torch.cuda.is_available():
        return False, False
    return True, bool(torch.cuda.is_bf16_supported())


def local_placement(nbytes: int = 0) -> LocalPlacement:
    """Where a model of ``nbytes`` goes when ``ctx.memory.place`` answered ``None`` (no broker)."""
    if os.environ.get("INLINE_PROFILE") == "cpu":
        return LocalPlacement("cpu", "float32" if nbytes <= CPU_FP32_MAX else None)
    cuda, bf16 = _cuda()
    device = os.environ.get("INLINE_DEVICE") or ("cuda" if cuda else "cpu")
    if device.startswith("cuda"):  # bf16 unless torch says the card has none
        return LocalPlacement(device, "bfloat16" if bf16 or not cuda else "float16")
    return LocalPlacement(device, "float32" if nbytes <= CPU_FP32_MAX else None)
