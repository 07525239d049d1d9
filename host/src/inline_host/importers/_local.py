"""The models on this machine: what ``models/`` holds, each with its card, and removing one.

A model is a folder (or a weight file) directly under one of the category folders of
``models/`` (``llm/``, ``diffusers/``, ``checkpoints/``...); its name is the entry's name, the
value a node's picker offers. It is complete when no import of it is staged and it holds a
weight file. Removing one moves it aside first (one rename: a picker never lists half of it),
then deletes it, with whatever an unfinished import of it staged.
"""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path
from typing import Any, Final

import msgspec

from ..hub import (
    CATEGORY_DIRS,
    SOURCE_FILE,
    STAGING,
    WEIGHT_SUFFIXES,
    CardError,
    read_card,
)
from ..workers import kept_beside
from ._base import IMPORTS

#: The category folders, each once, with the category a folder's model has by default.
FOLDERS: Final = {folder: category for category, folder in reversed(CATEGORY_DIRS.items())}


class ModelNotFound(LookupError):
    """No model, or more than one, has the name (the message says which)."""


class LocalModel(msgspec.Struct, frozen=True):
    """One model of ``models/``: name, category, where it is, its bytes, its source, whether
    it is complete and deployed, and (``show``) its card."""

    name: str
    category: str
    folder: str
    path: str
    bytes: int
    source: str | None
    complete: bool
    deployed: bool = False
    card: dict[str, Any] | None = None


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                continue
    return total


def _has_weights(path: Path) -> bool:
    if path.is_file():
        return path.name.endswith(WEIGHT_SUFFIXES)
    return any(f.endswith(WEIGHT_SUFFIXES) for _, _, files in os.walk(path) for f in files)


def _source(path: Path, card: dict[str, Any]) -> str | None:
    if isinstance(card.get("source"), str):
        return str(card["source"])
    try:
        record = msgspec.json.decode((path / SOURCE_FILE).read_bytes())
    except (OSError, msgspec.DecodeError):
        return None
    return str(record["source"]) if isinstance(record, dict) and "source" in record else None


def describe_local(models_dir: Path, folder: str, entry: Path, *, with_card: bool) -> LocalModel:
    """One entry of a category folder as a ``LocalModel``."""
    try:
        card = read_card(entry) if entry.is_dir() else {}
    except CardError:
        card = {}
    staged = (models_dir / STAGING / IMPORTS / f"{folder}--{entry.name}").exists()
    category = card.get("category") if card.get("category") in CATEGORY_DIRS else FOLDERS[folder]
    return LocalModel(
        name=entry.name,
        category=str(category),
        folder=folder,
        path=str(entry),
        bytes=_size(entry),
        source=_source(entry, card) if entry.is_dir() else None,
        complete=not staged and _has_weights(entry),
        card=(card or None) if with_card else None,
    )


def list_local(models_dir: Path) -> list[LocalModel]:
    """Every model of ``models_dir``, by folder then name."""
    out: list[LocalModel] = []
    for folder in sorted(FOLDERS):
        base = models_dir / folder
        if not base.is_dir():
            continue
        for entry in sorted(base.iterdir(), key=lambda p: p.name):
            model = entry.is_dir() or entry.name.endswith(WEIGHT_SUFFIXES)
            if entry.name.startswith(".") or not model:
                continue
            out.append(describe_local(models_dir, folder, entry, with_card=False))
    return out


def find_local(models_dir: Path, name: str) -> LocalModel:
    """The model named ``name`` (or ``FOLDER/NAME`` where two folders hold one name), with its
    card; ``ModelNotFound`` otherwise."""
    folder, _, entry = name.rpartition("/")
    found = [m for m in list_local(models_dir) if m.name == entry and folder in ("", m.folder)]
    if not found:
        raise ModelNotFound(f"no model '{name}' in {models_dir} (inline models list shows them)")
    if len(found) > 1:
        names = ", ".join(f"{m.folder}/{m.name}" for m in found)
        raise ModelNotFound(f"'{name}' names more than one model ({names}): say which")
    m = found[0]
    return describe_local(models_dir, m.folder, Path(m.path), with_card=True)


def remove_local(models_dir: Path, model: LocalModel) -> None:
    """Delete ``model``'s folder (or file) and whatever an unfinished import of it staged."""
    entry = Path(model.path)
    aside = models_dir / STAGING / f"removing-{entry.name}-{secrets.token_hex(4)}"
    aside.parent.mkdir(parents=True, exist_ok=True)
    os.replace(entry, aside)  # gone from every picker at once
    if aside.is_dir():
        shutil.rmtree(aside, ignore_errors=True)
    else:
        aside.unlink(missing_ok=True)
        for kept in kept_beside(entry):  # the hash (and lock) a cluster fetch kept beside it
            kept.unlink(missing_ok=True)
    shutil.rmtree(models_dir / STAGING / IMPORTS / f"{model.folder}--{entry.name}",
                  ignore_errors=True)  # fmt: skip
