"""Loading a detected component: check keys and shapes from the header, then map the weights.

Nothing is read before the check passes: the module is built empty (meta parameters), the file's
keys are converted with diffusers' own converters on meta tensors, and the result must match the
module key for key and shape for shape. Then every tensor comes memory-mapped from safetensors
straight to its device and is assigned in place (no extra copy in RAM).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inline_sdk import local_placement

from ._errors import KeysMismatch
from ._families import Detection
from ._header import DTYPE_BYTES

TORCH_DTYPES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
    "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
}  # fmt: skip


_IMPORT_LOCK = threading.Lock()
_IMPORTED = False
#: accelerate's ``init_empty_weights`` patches ``nn.Module.register_parameter`` process-wide; two
#: threads inside it at once can leave it patched, after which every assigned weight lands on the
#: meta device. Building empty modules and assigning weights therefore happen under this lock.
_BUILD_LOCK = threading.RLock()


def ensure_imports() -> None:
    """Import torch, diffusers and transformers once, under a lock.

    Calls run in threads and independent nodes run at once; diffusers' and transformers' lazy
    modules are not safe to import concurrently (a racing thread sees a half-made module), so
    every entry point that needs them comes through here first.
    """
    global _IMPORTED
    if _IMPORTED:
        return
    with _IMPORT_LOCK:
        if _IMPORTED:
            return
        # diffusers and transformers import torchao when it is installed; its CUDA-only kernels
        # are absent on CPU machines and it would warn about each one
        os.environ.setdefault("TORCHAO_FORCE_SKIP_LOADING_SO_FILES", "1")
        import accelerate  # noqa: F401
        import diffusers.loaders.single_file_utils  # noqa: F401
        import safetensors.torch  # noqa: F401
        import torch  # noqa: F401
        from diffusers import (  # noqa: F401
            AutoencoderKL,
            FlowMatchEulerDiscreteScheduler,
            ZImageTransformer2DModel,
        )
        from transformers import AutoTokenizer, Qwen3Config, Qwen3Model  # noqa: F401

        _IMPORTED = True


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a component runs and in which dtype (``None``: the file's own), how its weights are
    quantized (``none``/``int8`` weight-only) and offloaded (``resident``; ``model``: moved to
    the device while it runs; ``sequential``: streamed layer by layer)."""

    device: str
    dtype: str | None
    quantization: str = "none"
    offload: str = "resident"
    tiling: bool = False
    #: The broker's sequence-parallel plan (``ulysses=2``) and one device per rank.
    parallel: str | None = None
    devices: tuple[str, ...] = ()
    #: The policy's SDPA kernel (``runtime._attention``: flash / efficient on CUDA).
    attention: str = "sdpa"


def default_placement(nbytes: int) -> Placement:
    """The device and dtype for a model of ``nbytes`` when no host broker answers (a library
    used outside a worker, or an old host): the SDK's one local rule (``local_placement``), the
    policy proper living in the host."""
    local = local_placement(nbytes)
    return Placement(local.device, local.dtype)


def meta_state(det: Detection) -> dict[str, Any]:
    """The file's tensors as meta tensors (shape and dtype only), converted to module keys."""
    import torch

    sd = {
        key: torch.empty(info.shape, dtype=getattr(torch, TORCH_DTYPES.get(info.dtype, "float32")),
                         device="meta")
        for key, info in det.keys.items()
    }  # fmt: skip
    return det.component.convert(sd, det.layout, det.config)


def check(det: Detection, module: Any | None = None) -> Any:
    """Build the empty module and compare it with the file; raise ``KeysMismatch``. The module."""
    if module is None:
        with _BUILD_LOCK:
            module = det.component.create(det.config)
    want = {k: tuple(v.shape) for k, v in module.state_dict().items()}
    try:
        have = {k: tuple(v.shape) for k, v in meta_state(det).items()}
    except (KeyError, RuntimeError, ValueError) as exc:
        raise KeysMismatch(det.location, det.label, [str(exc)], [], []) from None
    missing = sorted(k for k in want if k not in have)
    unexpected = sorted(k for k in have if k not in want)
    mismatched = sorted((k, have[k], want[k]) for k in want if k in have and have[k] != want[k])
    if missing or unexpected or mismatched:
        raise KeysMismatch(det.location, det.label, missing, unexpected, mismatched)
    return module


def load(det: Detection, placement: Placement) -> Any:
    """The component, checked, with its weights mapped from the file(s) onto ``placement``."""

    with _BUILD_LOCK:
        return _load(det, placement)


def _load(det: Detection, placement: Placement) -> Any:
    import torch
    from safetensors import safe_open

    module = check(det)
    device = placement.device
    prefix = det.prefix
    sd: dict[str, Any] = {}
    for file in det.header.files:
        with safe_open(str(file), framework="pt", device=device) as fh:
            for key in fh.keys():  # noqa: SIM118 (a safe_open handle, not a dict)
                if key.startswith(prefix) and key[len(prefix) :] in det.keys:
                    sd[key[len(prefix) :]] = fh.get_tensor(key)
    sd = det.component.convert(sd, det.layout, det.config)
    if placement.dtype is not None:
        dtype = getattr(torch, placement.dtype)
        sd = {k: v.to(dtype) if v.is_floating_point() else v for k, v in sd.items()}
    module.load_state_dict(sd, strict=True, assign=True)
    left = [name for name, p in module.named_parameters() if p.is_meta]
    if left:
        raise KeysMismatch(det.location, det.label, left, [], [])
    module.to(device)  # buffers made at construction (rope tables) follow the weights
    module.eval().requires_grad_(False)
    return module


def load_placed(det: Detection, placement: Placement) -> Any:
    """``load`` onto where the weights live between uses, then ``apply_placement``."""
    home = placement.device
    if placement.offload != "resident" or placement.quantization != "none":
        # offloaded weights live in system RAM; int8 is made layer by layer from
        # the mapped file, so the full-precision model never sits on the device
        home = "cpu"
    return apply_placement(load(det, Placement(home, placement.dtype)), placement)


def apply_placement(module: Any, placement: Placement) -> Any:
    """Apply the rest of a plan to a loaded module: int8 weight-only quantization (torchao
    ``quantize_`` after the load: diffusers' ``from_single_file(quantization_config=...)``
    silently skips it), then the device or the offload hooks (accelerate)."""
    device = placement.device
    resident_on = device if placement.offload == "resident" else "cpu"
    if placement.quantization == "int8" and resident_on != "cpu":
        for block in _blocks(module):  # one block on the device in full precision at a time
            block.to(resident_on)
            quantize_int8(block, trim=False)
        free_memory()
    elif placement.quantization == "int8":
        quantize_int8(module)
    module.to(resident_on)
    if placement.offload == "model":
        from accelerate import cpu_offload_with_hook

        _, hook = cpu_offload_with_hook(module, execution_device=device)
        module._inline_offload_hook = hook
    elif placement.offload == "sequential":
        from accelerate import cpu_offload

        cpu_offload(module, execution_device=device)
    module._inline_device = device
    if placement.tiling:
        module._inline_tiling = True
    return module


def _blocks(module: Any) -> list[Any]:
    """The module's children, with block lists (``layers``...) opened into their blocks."""
    import torch

    out = []
    for child in module.children():
        out.extend(child if isinstance(child, torch.nn.ModuleList) else [child])
    return out


def quantize_int8(module: Any, *, trim: bool = True) -> None:
    """int8 weight-only quantization of every linear layer, in place (torchao)."""
    # torchao's CUDA-only kernels are absent from CPU wheels; without this it warns on import
    os.environ.setdefault("TORCHAO_FORCE_SKIP_LOADING_SO_FILES", "1")
    import torch
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    quantize_(module, Int8WeightOnlyConfig())
    # What stays full precision (norms, embedders) may still view the memory-mapped file, which
    # keeps the whole mapping, and every page quantization read, resident: own those few bytes.
    with torch.no_grad():
        for sub in module.modules():
            for name, p in list(sub.named_parameters(recurse=False)):
                if type(p.data) is torch.Tensor and p.device.type == "cpu":
                    setattr(sub, name, torch.nn.Parameter(p.data.clone(), requires_grad=False))
            for name, b in list(sub.named_buffers(recurse=False)):
                if type(b) is torch.Tensor and b.device.type == "cpu":
                    sub.register_buffer(
                        name, b.clone(), persistent=name not in sub._non_persistent_buffers_set
                    )
    if trim:
        free_memory()  # the full-precision weights each layer dropped, and the mapping


def execution_device(module: Any) -> Any:
    """The device a module computes on (offloaded modules keep their weights elsewhere)."""
    import torch

    dev = getattr(module, "_inline_device", None)
    return torch.device(dev) if dev is not None else module.device


def offload_others(keep: Any, modules: list[Any]) -> None:
    """Move every model-offloaded module but ``keep`` back to system RAM (one on the device)."""
    for m in modules:
        hook = getattr(m, "_inline_offload_hook", None)
        if m is not keep and hook is not None:
            hook.offload()


def nbytes_of(det: Detection) -> int:
    """Bytes of tensor data."""
    return sum(i.numel * DTYPE_BYTES.get(i.dtype, 1) for i in det.keys.values())


class ModelCache:
    """Keeps one loaded model per slot (``diffusion``, ``vae``, ``text_encoder``...).

    Asking a slot for another file frees the model it held first, so switching checkpoints never
    holds two in memory. Thread-safe: concurrent calls for one slot load once.
    """

    def __init__(self) -> None:
        self._slots: dict[str, tuple[tuple[Any, ...], Any]] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def get(self, slot: str, key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
        """The model in ``slot`` for ``key``, made by ``make()`` when the slot holds another."""
        with self._guard:
            lock = self._locks.setdefault(slot, threading.Lock())
        with lock:
            held = self._slots.get(slot)
            if held is not None and held[0] == key:
                return held[1]
            if held is not None:
                self._slots.pop(slot, None)
                del held
                free_memory()
            value = make()
            self._slots[slot] = (key, value)
            return value

    def peek(self, slot: str) -> tuple[tuple[Any, ...], Any] | None:
        """The key and model ``slot`` holds now, without loading anything."""
        return self._slots.get(slot)

    def drop(self, slot: str) -> None:
        """Free what ``slot`` holds (the memory broker asked to make room)."""
        with self._guard:
            lock = self._locks.setdefault(slot, threading.Lock())
        with lock:
            held = self._slots.pop(slot, None)
            del held
            free_memory()

    def models(self) -> list[Any]:
        """Every model held."""
        return [item[1] for item in self._slots.values()]

    def held(self) -> dict[str, tuple[Any, ...]]:
        """What each slot holds now (its key)."""
        return {slot: item[0] for slot, item in self._slots.items()}

    def clear(self) -> None:
        """Drop everything."""
        self._slots.clear()
        free_memory()


def free_memory() -> None:
    """Give freed tensors back (Python, the C heap, then the CUDA caching allocator)."""
    gc.collect()
    trim_heap()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:  # pragma: no cover
        pass


def trim_heap() -> None:
    """Return freed C-heap pages to the OS (glibc keeps them, in every thread's arena, unless
    asked): a render's activations otherwise stay charged to the worker after it finished."""
    if sys.platform == "linux":
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6").malloc_trim(0)


def file_key(path: Path) -> tuple[Any, ...]:
    """What identifies a file's content cheaply (path, size, mtime)."""
    st = path.stat()
    return (str(path), st.st_size, st.st_mtime_ns)
