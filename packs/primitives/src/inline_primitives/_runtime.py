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

from inline_sdk import Context, Memory
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

#: The key of this library's models in the worker's cache (``ctx.cache``).
CACHE_KEY: Final = "inline_primitives.models"
#: The policy's role names for the library's slots.
ROLES: Final = {"diffusion": "diffusion", "vae": "vae", "text_encoder": "text-encoder"}
#: Policy dtype names -> torch dtype names.
DTYPES: Final = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def models_cache(ctx: Context) -> ModelCache:
    """The worker's loaded models (one per slot), kept in ``ctx.cache``: never a module global."""
    return ctx.cache.get(CACHE_KEY, ModelCache)


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
        tiling=placed.vae_tiling and plan.role == "vae",
        parallel=getattr(placed, "parallel", None) if plan.role == "diffusion" else None,
        devices=tuple(getattr(placed, "devices", ())) if plan.role == "diffusion" else (),
        attention=str(getattr(placed, "attention", "sdpa")),
    )


Decision = tuple[Placement, ComponentPlan | None]


def _ask(memory: Memory | None, sizes: list[ModelSize], activation: int = 0) -> list[Decision]:
    """One plan per component: the broker's (asked once, for all of them together, so the
    policy sees the whole render: text-encoder parking, int8 for all), else the local default."""
    placed = memory.place(sizes, activation) if memory is not None else None
    if placed is None:
        return [(default_placement(s.bytes), None) for s in sizes]
    if not placed.fits or len(placed.components) != len(sizes):
        raise WontFit(", ".join(s.name for s in sizes), placed.reason)
    by_name = {c.name: c for c in placed.components}
    plans = [by_name.get(s.name, placed.components[i]) for i, s in enumerate(sizes)]
    return [(plan_placement(plan, placed), plan) for plan in plans]


def _is_loaded(cache: ModelCache, slot: str, path: Path) -> bool:
    key = file_key(path)
    held = cache.peek(slot)
    return held is not None and held[0][: len(key)] == key


def _loaded(cache: ModelCache, slot: str, path: Path, memory: Memory | None) -> Any | None:
    """What ``slot`` holds if it is ``path`` already (marked used; it keeps its plan)."""
    held = cache.peek(slot)
    if held is None or not _is_loaded(cache, slot, path):
        return None
    if memory is not None:
        memory.touch(slot)
    return held[1]


def _get(
    cache: ModelCache,
    slot: str,
    path: Path,
    det: Detection,
    memory: Memory | None,
    make: Any,
    decided: Decision | None = None,
) -> Any:
    found = _loaded(cache, slot, path, memory)
    if found is not None:
        return found
    size = _size(det, slot, path)
    where, plan = decided if decided is not None else _ask(memory, [size])[0]
    # the slot frees its old model before loading (nothing here holds a reference to it)
    value = cache.get(slot, (*file_key(path), where), lambda: make(where))
    if memory is not None and plan is not None:
        memory.hold(slot, size.name, plan.bytes or size.bytes, plan, lambda: cache.drop(slot))
    return value


def activation_bytes(width: int, height: int, *, batch: int = 1, cfg: bool = False) -> int:
    """Activation memory of one render (the policy's estimate for this family, bf16:
    ~918 MiB per 1024x1024 image, doubled with classifier-free guidance)."""
    mib = batch * (height // 8) * (width // 8) * 2 * 0.01 * 2.8
    return int(mib * (1 << 20) * (2 if cfg else 1))


def get_models(refs: dict[str, ModelRef], ctx: Context, *, activation: int = 0) -> dict[str, Any]:
    """The components of one render (``diffusion``, ``vae``, ``text_encoder`` refs), placed
    with a single ask when any of them must load: the policy plans the render as a whole."""
    ensure_imports()
    cache = models_cache(ctx)
    dets = {slot: (Path(ref.file), detect(Path(ref.file), slot)) for slot, ref in refs.items()}
    missing = [slot for slot, (path, _) in dets.items() if not _is_loaded(cache, slot, path)]
    decided: dict[str, Decision] = {}
    if missing:
        sizes = [_size(det, slot, path) for slot, (path, det) in dets.items()]
        decided = dict(zip(dets, _ask(ctx.memory, sizes, activation), strict=True))
    return {
        slot: (
            get_text_encoder(refs[slot], ctx, decided.get(slot))
            if slot == "text_encoder"
            else get_model(refs[slot], ctx, decided.get(slot))
        )
        for slot in dets
    }


def _modules(cache: ModelCache) -> list[Any]:
    """Every loaded module (a text encoder's model, not its wrapper)."""
    return [v.model if isinstance(v, TextEncoder) else v for v in cache.models()]


def _model(cache: ModelCache, det: Detection, where: Placement) -> Any:
    module = load_placed(det, where)
    module._inline_attention = where.attention  # the kernel the denoisers run (``runtime``)
    if where.parallel:  # the runtime's denoiser runs it in a worker group (``runtime``)
        module._inline_parallel = (where.parallel, where.devices)
    if where.offload == "model":  # one model-offloaded component on the device at a time
        module.register_forward_pre_hook(lambda m, _args: offload_others(m, _modules(cache)))
    return module


def get_model(ref: ModelRef, ctx: Context, decided: Decision | None = None) -> Any:
    """The loaded diffusion model or VAE behind ``ref`` (kept in the worker's cache until its
    slot changes file), placed where the host's broker (``ctx.memory``) says."""
    ensure_imports()
    cache = models_cache(ctx)
    path = Path(ref.file)
    det = detect(path, ref.kind)
    make = lambda where: _model(cache, det, where)  # noqa: E731
    return _get(cache, ref.kind, path, det, ctx.memory, make, decided)


def get_text_encoder(ref: ModelRef, ctx: Context, decided: Decision | None = None) -> TextEncoder:
    """The loaded text encoder behind ``ref`` with its tokenizer (see ``find_tokenizer``)."""
    ensure_imports()
    cache = models_cache(ctx)
    path = Path(ref.file)
    folder = find_tokenizer(path)  # before any weight is read: a missing tokenizer fails fast
    det = detect(path, "text_encoder")

    def make(where: Placement) -> TextEncoder:
        model = _model(cache, det, where)
        return TextEncoder(model, load_tokenizer(folder), str(path), where.device)

    return _get(cache, "text_encoder", path, det, ctx.memory, make, decided)
