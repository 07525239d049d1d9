"""Errors about model files, each naming the file and what is wrong with it::

ModelFileError          a model file or folder cannot be used (``path`` names it)
├── NotSafetensors      unreadable, not a safetensors file, or truncated
├── UnknownModel        no known family has this key layout (or it is another component)
├── KeysMismatch        a known family, but keys are missing or shapes do not match
├── WontFit             the memory policy found no way to run it on this machine
└── LoraRefused         (``_lora``) a LoRA whose keys or tensors cannot be merged (NaN, shapes)
"""

from __future__ import annotations

from pathlib import Path


class ModelFileError(ValueError):
    """A model file or folder cannot be used; ``path`` names it."""

    def __init__(self, path: Path | str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = str(path)


class NotSafetensors(ModelFileError):
    """The file is unreadable, is not safetensors, or is shorter than its header says."""


class UnknownModel(ModelFileError):
    """The keys match no known family, or the file is another kind of component."""


class KeysMismatch(ModelFileError):
    """The file looks like a known family but keys are missing, unexpected or mis-shaped."""

    def __init__(
        self,
        path: Path | str,
        label: str,
        missing: list[str],
        unexpected: list[str],
        mismatched: list[tuple[str, tuple[int, ...], tuple[int, ...]]],
    ) -> None:
        parts = []
        if missing:
            parts.append(f"{len(missing)} missing key(s): {_few(missing)}")
        if mismatched:
            shown = [f"{k} (file {list(g)}, expected {list(w)})" for k, g, w in mismatched]
            parts.append(f"{len(mismatched)} mis-shaped key(s): {_few(shown)}")
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected key(s): {_few(unexpected)}")
        detail = "; ".join(parts)
        super().__init__(path, f"does not match the {label} layout: {detail}. Nothing was loaded.")
        self.missing = missing
        self.unexpected = unexpected
        self.mismatched = mismatched


class WontFit(ModelFileError):
    """The host's memory policy refused the load (too big for VRAM + RAM); nothing was loaded."""

    def __init__(self, path: Path | str, reason: str) -> None:
        super().__init__(path, f"{reason}. Nothing was loaded.")
        self.reason = reason


def _few(items: list[str], limit: int = 8) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")
