"""Loaded pipelines, kept per worker: placed by the host's broker, compiled on request.

One pipeline at a time: picking another folder frees the one held first. Its image-to-image
sibling (``AutoPipelineForImage2Image.from_pipe``) shares its components, so it costs nothing.
The broker's plan (device, dtype, int8, offload) is applied with diffusers' own tools; without a
broker the pack falls back to CUDA in bf16 when present, else the CPU in fp32.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Final

from inline_sdk import Memory, local_placement
from inline_sdk.protocol import ComponentPlan, Placed

from ._checkpoint import checkpoint_sizes, load_single_file
from ._folder import Folder, sizes

log = logging.getLogger("inline.pack.diffusers")
DTYPES: Final = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
TILE_FROM_PIXELS: Final = 1024 * 1024


class NoImageToImage(ValueError):
    """The family of a pipeline has no image-to-image pipeline in diffusers."""


class WontFit(RuntimeError):
    """The broker found no room for the pipeline (its reason, with the sizes)."""


@dataclass
class Loaded:
    """A pipeline in memory, how it was placed, and what was compiled."""

    key: tuple[Any, ...]
    folder: Folder
    pipe: Any
    device: str
    plans: dict[str, ComponentPlan] = field(default_factory=dict)
    vae_tiling: bool = False
    compiled: list[str] = field(default_factory=list)
    img2img: Any | None = None
    eager_logged: bool = False


_IMPORT_LOCK = threading.Lock()


def import_diffusers() -> Any:
    """``diffusers`` (imported once, under a lock: its lazy modules race across threads)."""
    os.environ.setdefault("TORCHAO_FORCE_SKIP_LOADING_SO_FILES", "1")
    with _IMPORT_LOCK:
        import diffusers
        import torch  # noqa: F401
        from diffusers import AutoPipelineForImage2Image, DiffusionPipeline  # noqa: F401

    return diffusers


def default_plan() -> tuple[str, str]:
    """(device, dtype) when no broker answers: the SDK's one local rule."""
    local = local_placement()
    return local.device, local.dtype or "float32"


class Pipelines:
    """The worker's one loaded pipeline (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._held: Loaded | None = None
        self._memory: Memory | None = None

    def get(self, folder: Folder, memory: Memory, activation: int) -> Loaded:
        """The pipeline of ``folder``, loaded and placed if it is not the one held."""
        with self._lock:
            held = self._held
            if held is not None and held.key == folder.key():
                for slot in held.plans:
                    memory.touch(slot)
                return held
            self.drop()  # never two pipelines in memory
            loaded = self._load(folder, memory, activation)
            self._held = loaded
            return loaded

    def drop(self) -> None:
        """Free the pipeline held (a new folder was picked, or the broker asked for room)."""
        from inline_primitives import free_memory

        with self._lock:
            held, self._held = self._held, None
            if held is None:
                return
            if self._memory is not None:
                for slot in held.plans:
                    self._memory.drop(slot)
            del held
            free_memory()

    def img2img(self, loaded: Loaded) -> Any:
        """The family's image-to-image pipeline over the same components."""
        with self._lock:
            if loaded.img2img is None:
                from diffusers import AutoPipelineForImage2Image

                try:
                    loaded.img2img = AutoPipelineForImage2Image.from_pipe(loaded.pipe)
                except ValueError as exc:
                    raise NoImageToImage(
                        f"diffusers/generate: {type(loaded.pipe).__name__} (model "
                        f"'{loaded.folder.name}') has no image-to-image pipeline in diffusers, so "
                        f"it cannot take an 'image' input ({exc})"
                    ) from None
                loaded.img2img.set_progress_bar_config(disable=True)
            return loaded.img2img

    # loading ------------------------------------------------------------------------------
    def _plan(
        self, folder: Folder, memory: Memory, activation: int
    ) -> tuple[str, dict[str, str], dict[str, ComponentPlan], Placed | None]:
        want = checkpoint_sizes(folder) if folder.checkpoint is not None else sizes(folder)
        placed = memory.place(want, activation) if want else None
        if placed is None:
            device, dtype = default_plan()
            return device, {"default": dtype}, {}, None
        if not placed.fits or len(placed.components) != len(want):
            raise WontFit(f"diffusers/generate: '{folder.name}' does not fit: {placed.reason}")
        plans = {s.slot: p for s, p in zip(want, placed.components, strict=True)}
        dtypes = {
            s.slot.removeprefix("diffusers:"): DTYPES.get(p.dtype, p.dtype)
            for s, p in zip(want, placed.components, strict=True)
        }
        denoiser = next((p for p in placed.components if p.role == "diffusion"), None)
        first = denoiser or placed.components[0]
        dtypes["default"] = DTYPES.get(first.dtype, first.dtype)
        return first.device, dtypes, plans, placed

    def _load(self, folder: Folder, memory: Memory, activation: int) -> Loaded:
        import torch
        from diffusers import DiffusionPipeline

        device, dtypes, plans, placed = self._plan(folder, memory, activation)
        torch_dtype = {k: getattr(torch, v) for k, v in dtypes.items()}
        log.info("loading %s (%s) on %s, %s", folder.name, folder.class_name, device, dtypes)
        if folder.checkpoint is not None:  # one dtype: the single-file loader takes no map
            pipe = load_single_file(folder, torch_dtype["default"])
        else:
            pipe = DiffusionPipeline.from_pretrained(
                str(folder.path), local_files_only=True, torch_dtype=torch_dtype
            )
        pipe.set_progress_bar_config(disable=True)
        self._apply(pipe, device, plans, placed)
        loaded = Loaded(
            folder.key(),
            folder,
            pipe,
            device,
            plans,
            vae_tiling=bool(placed and placed.vae_tiling),
        )
        self._compile(loaded)
        self._memory = memory
        for slot, plan in plans.items():
            memory.hold(slot, plan.name, plan.bytes, plan, self._evicted)
        return loaded

    def _evicted(self) -> None:
        threading.Thread(target=self.drop, name="diffusers-evict", daemon=True).start()

    @staticmethod
    def _apply(
        pipe: Any, device: str, plans: dict[str, ComponentPlan], placed: Placed | None
    ) -> None:
        from inline_primitives._loading import quantize_int8

        for slot, plan in plans.items():
            if plan.quantization == "int8":
                quantize_int8(getattr(pipe, slot.removeprefix("diffusers:")))
        offloads = {p.offload for p in plans.values()}
        if "sequential" in offloads:
            pipe.enable_sequential_cpu_offload(device=device)
        elif "model" in offloads or (placed is not None and placed.park_text_encoder):
            pipe.enable_model_cpu_offload(device=device)
        else:
            pipe.to(device)

    @staticmethod
    def _compile(loaded: Loaded) -> None:
        if not loaded.folder.compile:
            return
        if not loaded.device.startswith("cuda"):
            log.info("%s: compile asked for, but not on CUDA: eager", loaded.folder.name)
            return
        pipe = loaded.pipe
        for name in loaded.folder.components:
            if name in ("transformer", "unet") or name.startswith("text_encoder"):
                module = getattr(pipe, name, None)
                if module is None or not hasattr(module, "compile"):
                    continue
                try:
                    module.compile(mode="reduce-overhead")  # CUDA graphs: "GRAPHED"
                    loaded.compiled.append(name)
                except Exception as exc:
                    log.warning("%s: compiling %s failed, eager: %s", loaded.folder.name, name, exc)
        if loaded.compiled:
            log.info("%s: GRAPHED %s (the VAE stays eager)", loaded.folder.name, loaded.compiled)


def uncompile(loaded: Loaded) -> None:
    """Back to eager (compiling failed at the first call); logged once."""
    for name in loaded.compiled:
        module = getattr(loaded.pipe, name, None)
        if module is not None:
            module._compiled_call_impl = None
    if not loaded.eager_logged:
        log.warning("%s: compiled run failed, running eager from now on", loaded.folder.name)
        loaded.eager_logged = True
    loaded.compiled.clear()


def set_tiling(pipe: Any, loaded: Loaded, pixels: int) -> bool:
    """VAE tiling from 1024x1024 up (or when the plan asks), where the VAE supports it."""
    vae = getattr(pipe, "vae", None)
    tiled = loaded.vae_tiling or pixels >= TILE_FROM_PIXELS
    if vae is None or not hasattr(vae, "enable_tiling"):
        return False
    if tiled:
        vae.enable_tiling()
    elif hasattr(vae, "disable_tiling"):
        vae.disable_tiling()
    return tiled
