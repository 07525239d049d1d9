"""The worker's runtime settings, from its environment (torch-free: node declarations read them).

``INLINE_MAX_BATCH`` (default 4; 1 turns batching off) bounds a batch and is the concurrency the
batching nodes declare; ``INLINE_BATCH_WINDOW_MS`` (default 0) is how long an idle denoiser waits
for more calls; ``INLINE_COMPILE`` (``1``/``auto``, ``fused``, ``graphed``, ``eager``/``0``);
``INLINE_ATTENTION`` (``flash``, ``efficient``, ``cudnn``, ``math``, ``sdpa``) overrides the
policy's SDPA kernel on CUDA.
"""

from __future__ import annotations

import os
from typing import Final

DEFAULT_MAX_BATCH: Final = 4


def max_batch() -> int:
    """``INLINE_MAX_BATCH``: the most items one batch holds (and calls a node takes at once)."""
    raw = os.environ.get("INLINE_MAX_BATCH", "").strip()
    return max(1, int(raw)) if raw.isdigit() else DEFAULT_MAX_BATCH


def batch_window_s() -> float:
    """``INLINE_BATCH_WINDOW_MS`` in seconds (default 0: never wait when idle)."""
    raw = os.environ.get("INLINE_BATCH_WINDOW_MS", "").strip()
    try:
        return max(0.0, float(raw)) / 1000 if raw else 0.0
    except ValueError:
        return 0.0


def compile_setting() -> str:
    """``INLINE_COMPILE``: ``off`` unless set (``1``/``auto``: GRAPHED on CUDA, FUSED
    elsewhere; ``fused``, ``graphed`` or ``eager`` force a mode)."""
    raw = os.environ.get("INLINE_COMPILE", "").strip().lower()
    if raw in ("", "0", "off", "false", "no"):
        return "off"
    if raw in ("1", "on", "true", "yes", "auto"):
        return "auto"
    return raw


def attention_setting() -> str:
    """``INLINE_ATTENTION``, lower-cased; empty when unset (the policy's kernel)."""
    return os.environ.get("INLINE_ATTENTION", "").strip().lower()
