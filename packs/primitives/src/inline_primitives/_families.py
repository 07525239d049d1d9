"""Model families: recognising a weights file from its header, and what to build from it.

A family (Z-Image today) is a set of components (``diffusion``, ``vae``, ``text_encoder``), each
knowing its key layouts, how to infer its architecture from tensor shapes (ComfyUI-style model
detection), which config it ships for what shapes cannot tell, and how to build and convert it.
Adding a family is adding one module that declares its components and appending it to
``FAMILIES``; nothing else changes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from ._errors import KeysMismatch, UnknownModel
from ._header import TensorInfo, WeightsHeader, read_header

KINDS = ("diffusion", "vae", "text_encoder")
KIND_LABELS = {"diffusion": "diffusion model", "vae": "VAE", "text_encoder": "text encoder"}
#: Where each component lives inside a whole-pipeline (diffusers) folder.
PIPELINE_SUBFOLDERS = {"diffusion": "transformer", "vae": "vae", "text_encoder": "text_encoder"}

Keys = Mapping[str, TensorInfo]


@dataclass(frozen=True)
class Component:
    """One component of a family: how to recognise it and what to build from it."""

    family: str
    kind: str
    label: str
    config_file: str
    #: Key prefixes some files carry (``model.diffusion_model.``); stripped before matching.
    prefixes: tuple[str, ...]
    #: The layout name (``original``, ``diffusers``...) if these keys are this component.
    match: Callable[[Keys], str | None]
    #: The full config from shapes, over the shipped (or the folder's) config.
    infer: Callable[[Keys, str, dict[str, Any]], dict[str, Any]]
    #: torch: an empty (meta) module for a config.
    create: Callable[[dict[str, Any]], Any]
    #: torch: a state dict in the file's layout -> the module's keys.
    convert: Callable[[dict[str, Any], str, dict[str, Any]], dict[str, Any]]

    def shipped_config(self) -> dict[str, Any]:
        """The config this pack ships for the family (what shapes cannot tell)."""
        ref = resources.files("inline_primitives") / "configs" / self.family / self.config_file
        return json.loads(ref.read_text())


@dataclass(frozen=True)
class Family:
    """A model family and its components."""

    name: str
    label: str
    components: tuple[Component, ...]


@dataclass(frozen=True)
class Detection:
    """A weights location recognised as one component of one family."""

    component: Component
    location: Path
    header: WeightsHeader
    keys: dict[str, TensorInfo]
    prefix: str
    layout: str
    config: dict[str, Any]

    @property
    def label(self) -> str:
        """What it is, for people ("Z-Image Turbo transformer")."""
        return self.component.label


FAMILIES: list[Family] = []


def register(family: Family) -> Family:
    """Add a family to the ones detection knows."""
    FAMILIES.append(family)
    return family


def strip_prefix(tensors: Mapping[str, TensorInfo], prefixes: tuple[str, ...]) -> tuple[str, Keys]:
    """The first of ``prefixes`` that keys carry, and the keys with it removed (others dropped)."""
    for prefix in prefixes:
        if prefix and any(k.startswith(prefix) for k in tensors):
            return prefix, {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
    return "", dict(tensors)


def weights_location(path: Path, kind: str) -> Path:
    """Where a component's weights are: the file, the folder, or the pipeline's subfolder."""
    if path.is_dir() and (path / "model_index.json").is_file():
        return path / PIPELINE_SUBFOLDERS[kind]
    return path


def _folder_config(location: Path) -> dict[str, Any]:
    cfg = location / "config.json" if location.is_dir() else None
    if cfg is not None and cfg.is_file():
        try:
            data = json.loads(cfg.read_text())
            return data if isinstance(data, dict) else {}
        except (OSError, json.JSONDecodeError):
            return {}
    return {}


def _matches(header: WeightsHeader) -> list[tuple[Component, str, str, Keys]]:
    found = []
    for family in FAMILIES:
        for comp in family.components:
            prefix, keys = strip_prefix(header.tensors, comp.prefixes)
            layout = comp.match(keys)
            if layout is not None:
                found.append((comp, layout, prefix, keys))
    return found


_DETECTED: dict[tuple[Any, ...], Detection] = {}


def detect(path: Path, kind: str) -> Detection:
    """Recognise the weights at ``path`` as a ``kind`` component of a known family.

    Reads headers only (remembered per path, size and mtime). Raises ``NotSafetensors``
    (unreadable, truncated), ``UnknownModel`` (another component, or no known family) or
    ``KeysMismatch`` (a key the architecture is inferred from is missing), each naming the file.
    """
    try:
        st = path.stat()
    except OSError:
        st = None
    stamp = (kind, str(path), st.st_size, st.st_mtime_ns) if st is not None else None
    known = _DETECTED.get(stamp) if stamp is not None else None
    if known is not None:
        return known
    found = _detect(path, kind)
    if stamp is not None:
        _DETECTED[stamp] = found
    return found


def _detect(path: Path, kind: str) -> Detection:
    location = weights_location(path, kind)
    header = read_header(location)
    found = _matches(header)
    for comp, layout, prefix, keys in found:
        if comp.kind == kind:
            base = {**comp.shipped_config(), **_folder_config(location)}
            try:
                config = comp.infer(keys, layout, base)
            except (KeyError, IndexError, ZeroDivisionError) as exc:
                missing = [str(exc.args[0])] if isinstance(exc, KeyError) else []
                raise KeysMismatch(path, comp.label, missing, [], []) from None
            return Detection(comp, location, header, dict(keys), prefix, layout, config)
    wanted = KIND_LABELS[kind]
    if found:
        comp = found[0][0]
        raise UnknownModel(
            path, f"this is a {comp.label} ({KIND_LABELS[comp.kind]}), not a {wanted}"
        )
    known = ", ".join(f.label for f in FAMILIES) or "none"
    sample = ", ".join(sorted(header.tensors)[:4])
    raise UnknownModel(
        path,
        f"not a {wanted} of a known family ({known}): its {len(header.tensors)} tensors "
        f"(such as {sample}) match no known layout",
    )


def describe(path: Path) -> str | None:
    """What the weights at ``path`` look like ("Z-Image Turbo VAE"), or None."""
    try:
        found = _matches(read_header(path))
    except Exception:
        return None
    return found[0][0].label if found else None
