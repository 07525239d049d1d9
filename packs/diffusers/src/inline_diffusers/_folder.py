"""A diffusers pipeline folder: where it is, what it holds, how big each part is, its card.

Everything here reads JSON and safetensors headers only (never a weight): the sizes the host's
memory broker plans with come from each component subfolder's headers (dtype x shape).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from inline_sdk import check_model_name
from inline_sdk.protocol import ModelSize

CATEGORY: Final = "diffusers"
#: Component names -> the policy's roles (the rest is "other").
ROLES: Final = {"transformer": "diffusion", "unet": "diffusion", "prior": "diffusion", "vae": "vae"}


class PipelineFolderError(ValueError):
    """A model pick that is no usable diffusers pipeline folder (the message says why)."""


@dataclass(frozen=True, slots=True)
class Folder:
    """A pipeline folder: its path, pipeline class, components, and model card; with
    ``checkpoint``, a single-file checkpoint whose weights load with this folder's configs."""

    path: Path
    class_name: str
    components: tuple[str, ...]
    card: dict[str, Any]
    checkpoint: Path | None = None

    @property
    def name(self) -> str:
        return self.checkpoint.name if self.checkpoint is not None else self.path.name

    @property
    def compile(self) -> bool:
        """``compile: true`` in the model card ``inline.json``."""
        return self.card.get("compile") is True

    def key(self) -> tuple[Any, ...]:
        """What identifies this folder's content cheaply (path, model_index.json's mtime, and
        the checkpoint's path, mtime and size)."""
        st = (self.path / "model_index.json").stat()
        key: tuple[Any, ...] = (str(self.path), st.st_mtime_ns, st.st_size)
        if self.checkpoint is not None:
            cp = self.checkpoint.stat()
            key += (str(self.checkpoint), cp.st_mtime_ns, cp.st_size)
        return key


def folders(models_dir: Path) -> list[Path]:
    """The pipeline folders of ``models/diffusers/`` (those with a ``model_index.json``)."""
    root = models_dir / CATEGORY
    if not root.is_dir():
        return []
    return sorted(
        p
        for p in root.iterdir()
        if not p.name.startswith(".") and (p / "model_index.json").is_file()
    )


def resolve(models_dir: Path, pick: str) -> Folder:
    """The folder picked (or, with no pick, the first one); raises ``PipelineFolderError``."""
    root = models_dir / CATEGORY
    if not pick:
        found = folders(models_dir)
        if not found:
            raise PipelineFolderError(
                f"diffusers/generate: no pipeline folder in {root}: put a diffusers pipeline "
                f"(a folder with model_index.json) in {root}/<name>/ and pick it as 'model'"
            )
        return read(found[0])
    try:
        check_model_name(pick)
    except ValueError as exc:
        raise PipelineFolderError(f"diffusers/generate: model {exc}") from None
    path = root / pick
    if not path.is_dir():
        names = ", ".join(p.name for p in folders(models_dir)) or "none"
        raise PipelineFolderError(
            f"diffusers/generate: no pipeline folder '{pick}' in {root} (there: {names})"
        )
    return read(path)


def read(path: Path) -> Folder:
    """Read ``model_index.json`` and the optional model card ``inline.json``."""
    index_path = path / "model_index.json"
    try:
        index = json.loads(index_path.read_text())
    except FileNotFoundError:
        raise PipelineFolderError(
            f"diffusers/generate: {path} is no diffusers pipeline folder (no model_index.json)"
        ) from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise PipelineFolderError(f"diffusers/generate: cannot read {index_path}: {exc}") from None
    if not isinstance(index, dict) or not isinstance(index.get("_class_name"), str):
        raise PipelineFolderError(f"diffusers/generate: {index_path} names no _class_name")
    components = tuple(
        k
        for k, v in index.items()
        if not k.startswith("_") and isinstance(v, list) and len(v) == 2 and v[0] is not None
    )
    card: dict[str, Any] = {}
    card_path = path / "inline.json"
    if card_path.is_file():
        try:
            loaded = json.loads(card_path.read_text())
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise PipelineFolderError(
                f"diffusers/generate: the model card {card_path} is not valid JSON: {exc}"
            ) from None
        if not isinstance(loaded, dict):
            raise PipelineFolderError(f"diffusers/generate: {card_path} must hold a JSON object")
        card = loaded
    return Folder(path, index["_class_name"], components, card)


def role(component: str) -> str:
    """The policy's role of a component."""
    if component.startswith("text_encoder"):
        return "text-encoder"
    return ROLES.get(component, "other")


def sizes(folder: Folder) -> list[ModelSize]:
    """One size per weighted component, from its subfolder's safetensors headers."""
    from inline_primitives import read_header

    out = []
    for name in folder.components:
        sub = folder.path / name
        if not sub.is_dir() or not any(sub.glob("*.safetensors")):
            continue  # a scheduler, a tokenizer: no weights
        header = read_header(sub)
        out.append(
            ModelSize(
                name=f"{folder.name}/{name}",
                role=role(name),
                params=header.params,
                bytes=header.nbytes,
                slot=f"diffusers:{name}",
            )
        )
    return out
