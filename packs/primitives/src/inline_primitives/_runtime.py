"""Loaded components, kept per worker process: one model per slot, reloaded only on change.

Nodes never pick a device. Before a slot loads a file, the library asks the host's memory broker
(``ctx.memory``) where and how it goes; the host's policy answers with a plan (device, dtype, int8
or not, resident / model offload / sequential streaming) after making room, and this module
applies it and tells the broker what it holds. Without a broker (a library used outside a worker,
or an old host) it falls back to ``default_placement``: CUDA in bf16, else the CPU in fp32.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from inline_sdk import Memory
from inline_sdk.protocol import ComponentPlan, ModelSize, Placed

from ._errors import WontFit
from ._families import Detection, detect
from ._loading import (
    ModelCache,
    Placement,
    default_placement,
    ensure_imports,
    file_key,
    load_placed,
    nbytes_of,
    offload_others,
)
from ._refs import ModelRef
from ._text import TextEncoder, find_tokenizer, load_tokenizer

CACHE = ModelCache()
#: The policy's role names for the library's slots.
ROLES: Final = {"diffusion": "diffusion", "vae": "vae", "text_encoder": "text-encoder"}
#: Policy dtype names -> torch dtype names.
DTYPES: Final = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def _size(det: Detection, slot: str, path: Path) -> ModelSize:
    params = sum(i.numel for i in det.keys.values())
    role = ROLES.get(slot, "other")
    return ModelSize(name=str(path), role=role, params=params, bytes=nbytes_of(det), slot=slot)


def plan_placement(plan: ComponentPlan, placed: Placed) -> Placement:
    """The library's placement for one component of the broker's answer."""
    return Placement(
        device=plan.device,
        dtype=DTYPES.get(plan.dtype, plan.dtype),
        quantization=plan.quantization,
        offload=plan.offload,
        parked=placed.park_text_encoder
        and plan.role == "text-encoder"
        and plan.offload == "resident",  # offload hooks move it themselves
        tiling=placed.vae_tiling and plan.role == "vae",
    )


def _ask(memory: Memory | None, size: ModelSize) -> tuple[Placement, ComponentPlan | None]:
    placed = memory.place([size]) if memory is not None else None
    if placed is None:
        where = default_placement(size.bytes)
        return where, None
    if not placed.fits or not placed.components:
        raise WontFit(size.name, placed.reason)
    plan = placed.components[0]
    return plan_placement(plan, placed), plan


def _get(slot: str, path: Path, det: Detection, memory: Memory | None, make: Any) -> Any:
    key = file_key(path)
    held = CACHE.peek(slot)
    if held is not None and held[0][: len(key)] == key:  # loaded already: keep its plan
        if memory is not None:
            memory.touch(slot)
        return held[1]
    size = _size(det, slot, path)
    where, plan = _ask(memory, size)
    value = CACHE.get(slot, (*key, where), lambda: make(where))
    if memory is not None and plan is not None:
        memory.hold(slot, size.name, plan.bytes or size.bytes, plan, lambda: CACHE.drop(slot))
    return value


def _model(det: Detection, where: Placement) -> Any:
    module = load_placed(det, where)
    if where.offload == "model":  # one model-offloaded component on the device at a time
        module.register_forward_pre_hook(lambda m, _args: offload_others(m, CACHE.models()))
    return module


def get_model(ref: ModelRef, memory: Memory | None = None) -> Any:
    """The loaded diffusion model or VAE behind ``ref`` (kept until its slot changes file),
    placed where the host's broker says (``memory``: the node's ``ctx.memory``)."""
    ensure_imports()
    path = Path(ref.file)
    det = detect(path, ref.kind)
    return _get(ref.kind, path, det, memory, lambda where: _model(det, where))


def get_text_encoder(ref: ModelRef, memory: Memory | None = None) -> TextEncoder:
    """The loaded text encoder behind ``ref`` with its tokenizer (see ``find_tokenizer``)."""
    ensure_imports()
    path = Path(ref.file)
    folder = find_tokenizer(path)  # before any weight is read: a missing tokenizer fails fast
    det = detect(path, "text_encoder")

    def make(where: Placement) -> TextEncoder:
        model = _model(det, where)
        return TextEncoder(
            model, load_tokenizer(folder), str(path), where.device, parked=where.parked
        )

    return _get("text_encoder", path, det, memory, make)
