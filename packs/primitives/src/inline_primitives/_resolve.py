"""Finding model files in the models dir (ComfyUI layout), refusing names that leave it."""

from __future__ import annotations

from pathlib import Path
from typing import Final

WEIGHT_SUFFIXES: Final = (".safetensors", ".ckpt", ".pt", ".pth", ".bin", ".gguf", ".sft")


def check_name(name: str) -> str:
    """``name`` if it is a plain entry of a category folder; raises ``ValueError``."""
    if (
        not name
        or name in (".", "..")
        or "/" in name
        or "\\" in name
        or "\x00" in name
        or name.startswith(".")
    ):
        raise ValueError(f"'{name}' is not a plain model name (no folders, no '..')")
    return name


def is_weight_entry(path: Path) -> bool:
    """A weight file, or a folder holding weights (a diffusers / HF folder)."""
    if path.is_file():
        return path.suffix.lower() in WEIGHT_SUFFIXES
    if path.is_dir():
        return any(p.suffix.lower() in WEIGHT_SUFFIXES for p in path.rglob("*") if p.is_file())
    return False


def entries(folder: Path) -> list[Path]:
    """The weight entries of a category folder, alphabetically."""
    if not folder.is_dir():
        return []
    return sorted(
        (p for p in folder.iterdir() if not p.name.startswith(".") and is_weight_entry(p)),
        key=lambda p: p.name,
    )


def pick_file(models_dir: Path, category: str, name: str) -> Path:
    """The loaders' rule: ``name`` in ``models/<category>/``, or the first entry when empty."""
    folder = models_dir / category
    if name:
        check_name(name)
        path = folder / name
        if not path.exists():
            raise FileNotFoundError(f"Selected file '{name}' not found under models/{category}/.")
        return path
    found = entries(folder)
    if not found:
        raise FileNotFoundError(
            f"No model file found in models/{category}/. Add one there or pick it on the node."
        )
    return found[0]
