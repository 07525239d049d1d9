"""Compile, opt in: the transformer under ``torch.compile``, never on by default, never fatal.

On with ``INLINE_COMPILE=1`` or ``{"compile": true}`` in the model folder's ``inline.json``. On
CUDA it compiles ``reduce-overhead`` ("GRAPHED": a CUDA graph per shape, replayed every step);
elsewhere ``default`` ("FUSED": inductor's fused kernels). ``fused`` / ``graphed`` / ``eager``
force a mode. The first call of each shape is the warm-up, logged with its time; a compile that
fails falls back to eager, reported once in the log and in the worker's stats (``/v1/health``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any, Final

from inline_sdk import WorkerStats

from ._settings import compile_setting

log = logging.getLogger("inline.runtime.compile")
TORCH_MODES: Final = {"graphed": "reduce-overhead", "fused": "default"}
SIDECAR: Final = "inline.json"


def sidecar_wants_compile(model_file: str | Path | None) -> bool:
    """Whether the model folder's ``inline.json`` says ``"compile": true`` (a folder model's
    own, else the one beside the file)."""
    if model_file is None:
        return False
    path = Path(model_file)
    folder = path if path.is_dir() else path.parent
    try:
        data = json.loads((folder / SIDECAR).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("compile") in (True, "true", "1", 1)


def compile_mode(device: Any, model_file: str | Path | None = None) -> str:
    """``graphed``, ``fused`` or ``eager`` for a transformer on ``device``."""
    setting = compile_setting()
    if setting == "off" and sidecar_wants_compile(model_file):
        setting = "auto"
    if setting == "off":
        return "eager"
    if setting == "auto":
        return "graphed" if getattr(device, "type", str(device)) == "cuda" else "fused"
    if setting in ("fused", "graphed", "eager"):
        return setting
    log.warning("INLINE_COMPILE=%s is not a mode (1, fused, graphed, eager): eager", setting)
    return "eager"


class CompiledTransformer:
    """The transformer, compiled: call it like the module; other attributes are the module's."""

    def __init__(self, module: Any, mode: str, stats: WorkerStats | None = None) -> None:
        import torch

        self.module = module
        self.mode = mode
        self._stats = stats
        self._compiled: Any = torch.compile(module, mode=TORCH_MODES[mode], dynamic=False)
        self._shapes: dict[str, float] = {}
        self._failed: str | None = None
        self._lock = threading.Lock()
        self._report()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["module"], name)

    def _report(self) -> None:
        if self._stats is not None:
            self._stats.update(
                "compile",
                {
                    "mode": "eager" if self._failed else self.mode.upper(),
                    "requested": self.mode.upper(),
                    "warmups": dict(self._shapes),
                    "failed": self._failed,
                },
            )

    def __call__(self, hidden: list[Any], *args: Any, **kwargs: Any) -> Any:
        if self._failed is not None:
            return self.module(hidden, *args, **kwargs)
        shape = f"{len(hidden)}x" + "x".join(str(d) for d in hidden[0].shape)
        if shape in self._shapes:
            return self._compiled(hidden, *args, **kwargs)
        with self._lock:  # one warm-up per shape
            started = time.perf_counter()
            try:
                out = self._compiled(hidden, *args, **kwargs)
            except Exception as exc:  # never fatal: eager from now on, said once
                self._failed = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
                log.warning("compile (%s) failed, running eager: %s", self.mode, self._failed)
                self._report()
                return self.module(hidden, *args, **kwargs)
            took = time.perf_counter() - started
            self._shapes[shape] = round(took, 3)
            log.info("compile %s warm-up for shape %s: %.2f s", self.mode.upper(), shape, took)
            self._report()
            return out
