"""The models dir's naming rules, shared by the host's catalogs and the packs that load from it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

#: Files that count as weights in a catalog folder (the contract's list, plus ``.sft``).
WEIGHT_SUFFIXES: Final = frozenset(
    {".safetensors", ".sft", ".ckpt", ".pt", ".pth", ".bin", ".gguf", ".onnx"}
)


class UnsafeName(ValueError):
    """A model name that would leave its category folder."""


def check_model_name(name: str) -> str:
    """``name`` if it is a plain entry name of a category folder; raises ``UnsafeName``."""
    if (
        not name
        or name in (".", "..")
        or "/" in name
        or "\\" in name
        or "\x00" in name
        or name.startswith(".")
    ):
        raise UnsafeName(f"'{name}' is not a plain model name (no folders, no '..')")
    return name


def is_weight_entry(path: Path) -> bool:
    """A weight file, or a folder holding one anywhere below it (a diffusers / HF folder)."""
    if path.is_file():
        return path.suffix.lower() in WEIGHT_SUFFIXES
    if path.is_dir():
        for _dirpath, _dirs, files in os.walk(path):
            if any(Path(f).suffix.lower() in WEIGHT_SUFFIXES for f in files):
                return True
    return False
