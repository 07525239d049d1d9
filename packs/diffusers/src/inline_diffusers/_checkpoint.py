"""A single-file checkpoint (``models/checkpoints/<name>.safetensors``, ComfyUI's layout) as a
diffusers pipeline: its family read from its header, its configs from a diffusers folder.

A single file holds weights only. The pipeline's configs (model_index.json, each component's
config, the tokenizer, the scheduler) come from a diffusers folder of the same family: the one
picked as ``model``, else the folder named after the family's reference repository
(``models/diffusers/stable-diffusion-v1-5`` for a Stable Diffusion 1.x file), which
``inline models import`` writes; a file Inline wrote names its folder in its metadata.
diffusers' own loader would fetch missing configs from the Hub; here they are never fetched:
a missing folder is an error that names the import to run.

Everything here reads headers and JSON only, never a weight.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from inline_sdk import UnsafeName, check_model_name
from inline_sdk.protocol import ModelSize

from ._folder import CATEGORY, Folder, PipelineFolderError, read, role

CHECKPOINTS: Final = "checkpoints"
#: The key prefixes of an original (LDM) checkpoint -> the diffusers component they load.
PREFIXES: Final = (
    ("model.diffusion_model.", "unet"),
    ("first_stage_model.", "vae"),
    ("vae.", "vae"),
    ("cond_stage_model.", "text_encoder"),
    ("conditioner.embedders.0.", "text_encoder"),
    ("conditioner.embedders.1.", "text_encoder_2"),
)
#: Families diffusers' single-file loader tells apart that make still images from a prompt.
FAMILIES: Final = {
    "v1": "Stable Diffusion 1.x",
    "v2": "Stable Diffusion 2.x",
    "xl_base": "Stable Diffusion XL",
    "xl_refiner": "Stable Diffusion XL refiner",
    "playground-v2-5": "Playground v2.5",
    "inpainting": "Stable Diffusion 1.x inpainting",
    "inpainting_v2": "Stable Diffusion 2.x inpainting",
    "xl_inpaint": "Stable Diffusion XL inpainting",
}


class CheckpointError(PipelineFolderError):
    """A checkpoint pick that cannot be loaded (the message says why and what to do)."""


@dataclass(frozen=True, slots=True)
class Family:
    """What a checkpoint's header says it is: diffusers' model type and its reference repo,
    and the configs folder its metadata names (files Inline wrote, ``_ldm.CONFIGS_KEY``)."""

    model_type: str
    repo: str
    configs: str = ""

    @property
    def title(self) -> str:
        return FAMILIES.get(self.model_type, self.model_type)

    @property
    def folder_name(self) -> str:
        """The folder ``inline models import <repo>`` writes: the repo's own name."""
        return self.repo.rsplit("/", 1)[-1]


class _Shape:
    """A tensor as diffusers' family test reads it: its shape only."""

    __slots__ = ("shape",)

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape


def checkpoint_path(models_dir: Path, pick: str) -> Path:
    """The checkpoint file picked; raises ``CheckpointError``."""
    try:
        check_model_name(pick)
    except ValueError as exc:
        raise CheckpointError(f"diffusers/generate: checkpoint {exc}") from None
    root = models_dir / CHECKPOINTS
    path = root / pick
    if path.suffix.lower() in (".ckpt", ".pt", ".pth", ".bin"):
        raise CheckpointError(
            f"diffusers/generate: checkpoint '{pick}' is a pickle, which Inline does not load "
            "(loading one runs code it carries); use the model's .safetensors release"
        )
    if path.suffix.lower() not in (".safetensors", ".sft"):
        raise CheckpointError(f"diffusers/generate: checkpoint '{pick}' is not a .safetensors file")
    if not path.is_file():
        names = ", ".join(checkpoints(models_dir)) or "none"
        raise CheckpointError(
            f"diffusers/generate: no checkpoint '{pick}' in {root} (there: {names})"
        )
    return path


def checkpoints(models_dir: Path) -> list[str]:
    """The single-file checkpoints of ``models/checkpoints/``."""
    root = models_dir / CHECKPOINTS
    if not root.is_dir():
        return []
    return sorted(
        p.name
        for p in root.iterdir()
        if p.is_file() and p.suffix.lower() in (".safetensors", ".sft")
    )


def family(path: Path) -> Family:
    """The family diffusers' single-file loader sees in the checkpoint's header."""
    from diffusers.loaders.single_file_utils import (
        DIFFUSERS_DEFAULT_PIPELINE_PATHS,
        infer_diffusers_model_type,
    )
    from inline_primitives import read_header

    from ._ldm import CONFIGS_KEY

    header = read_header(path)
    shapes = {k: _Shape(t.shape) for k, t in header.tensors.items()}
    model_type = infer_diffusers_model_type(shapes)
    repo = DIFFUSERS_DEFAULT_PIPELINE_PATHS.get(model_type, {}).get(
        "pretrained_model_name_or_path", ""
    )
    return Family(model_type, repo, header.metadata.get(CONFIGS_KEY, ""))


def resolve_checkpoint(models_dir: Path, pick: str, config_pick: str) -> Folder:
    """The checkpoint ``pick`` with the configs of ``config_pick`` (a diffusers folder), or of
    its family's folder when ``config_pick`` is empty; raises ``CheckpointError``."""
    path = checkpoint_path(models_dir, pick)
    if config_pick:
        try:
            check_model_name(config_pick)
        except ValueError as exc:
            raise CheckpointError(f"diffusers/generate: model {exc}") from None
        config = models_dir / CATEGORY / config_pick
        if not (config / "model_index.json").is_file():
            raise CheckpointError(
                f"diffusers/generate: model '{config_pick}' (the configs for checkpoint "
                f"'{pick}') is no diffusers folder in {models_dir / CATEGORY}"
            )
        return _with_checkpoint(read(config), path)
    found = family(path)
    named = models_dir / CATEGORY / found.configs
    if found.configs and (named / "model_index.json").is_file():
        with contextlib.suppress(UnsafeName):
            check_model_name(found.configs)
            return _with_checkpoint(read(named), path)
    if found.model_type not in FAMILIES or not found.repo:
        raise CheckpointError(
            f"diffusers/generate: checkpoint '{pick}' is a '{found.model_type}' file, not a "
            "text-to-image checkpoint diffusers/generate loads"
        )
    config = models_dir / CATEGORY / found.folder_name
    if not (config / "model_index.json").is_file():
        raise CheckpointError(
            f"diffusers/generate: checkpoint '{pick}' is a {found.title} file; its configs "
            f"(model_index.json, tokenizer, scheduler) come from a diffusers folder of that "
            f"family, and {config} is not there: run `inline models import {found.repo}`, or "
            "pick a folder of the same family as 'model'"
        )
    return _with_checkpoint(read(config), path)


def _with_checkpoint(config: Folder, path: Path) -> Folder:
    return Folder(config.path, config.class_name, config.components, config.card, path)


def checkpoint_sizes(folder: Folder) -> list[ModelSize]:
    """One size per component the checkpoint's weights load, from its header."""
    from inline_primitives import read_header
    from inline_primitives._header import DTYPE_BYTES

    assert folder.checkpoint is not None
    header = read_header(folder.checkpoint)
    params: dict[str, int] = {}
    nbytes: dict[str, int] = {}
    for key, t in header.tensors.items():
        name = next((c for p, c in PREFIXES if key.startswith(p)), None)
        if name is None or name not in folder.components:
            continue  # EMA copies, a stray key: not loaded
        params[name] = params.get(name, 0) + t.numel
        nbytes[name] = nbytes.get(name, 0) + t.numel * DTYPE_BYTES.get(t.dtype, 1)
    return [
        ModelSize(
            name=f"{folder.name}/{name}",
            role=role(name),
            params=params[name],
            bytes=nbytes[name],
            slot=f"diffusers:{name}",
        )
        for name in folder.components
        if name in params
    ]


def load_single_file(folder: Folder, torch_dtype: Any) -> Any:
    """The pipeline of ``folder``'s checkpoint, with the configs of its folder (nothing is
    fetched: ``local_files_only`` with a local ``config`` never reaches the Hub)."""
    import diffusers

    assert folder.checkpoint is not None
    cls = getattr(diffusers, folder.class_name, None)
    if cls is None or not hasattr(cls, "from_single_file"):
        raise CheckpointError(
            f"diffusers/generate: {folder.class_name} (the configs in {folder.path}) cannot "
            "load a single-file checkpoint"
        )
    return cls.from_single_file(
        str(folder.checkpoint),
        config=str(folder.path),
        local_files_only=True,
        torch_dtype=torch_dtype,
    )
