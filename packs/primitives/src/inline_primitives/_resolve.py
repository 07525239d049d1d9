"""Finding model files in the models dir (ComfyUI layout), refusing names that leave it."""

from __future__ import annotations

from pathlib import Path

from inline_sdk import check_model_name as check_name
from inline_sdk import is_weight_entry


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
