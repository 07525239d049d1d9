"""Which files the one-click node loads: the handle, the pick, the environment, the recommended
file, then the first weight file of the category (a file or a diffusers folder each time)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from inline_primitives import CATEGORIES, TOKENIZER_FOLDER, as_ref, check_name, entries
from inline_primitives import find_tokenizer as _find_tokenizer

PULL_COMMAND: Final = "inline models pull alibaba/z-image-turbo"
LABELS: Final = {"diffusion": "Diffusion model", "vae": "VAE", "text_encoder": "Text encoder"}
PORTS: Final = {"diffusion": "model", "vae": "vae", "text_encoder": "text_encoder"}
ENV: Final = {
    "diffusion": "INLINE_ZIMAGE_MODEL",
    "vae": "INLINE_ZIMAGE_VAE",
    "text_encoder": "INLINE_ZIMAGE_TEXT_ENCODER",
}
#: The recommended files (the manifest's, which ``inline models pull`` fetches).
RECOMMENDED: Final = {
    "diffusion": "z_image_turbo_bf16.safetensors",
    "vae": "ae.safetensors",
    "text_encoder": "qwen_3_4b.safetensors",
}


@dataclass
class Resolution:
    """The file a component resolved to (or None), and every place that was looked at."""

    label: str
    path: Path | None
    looked: list[str] = field(default_factory=list)


class ModelsMissing(FileNotFoundError):
    """Components that could not be found; the message lists each, where it was looked for, and
    the command that fetches them."""

    def __init__(self, missing: list[Resolution]) -> None:
        lines = [f"Z-Image models missing: {', '.join(r.label for r in missing)}."]
        for r in missing:
            lines.append(f"  - {r.label}: looked for " + "; ".join(r.looked) + ".")
        lines.append(f"Fetch the recommended files with: {PULL_COMMAND}")
        super().__init__("\n".join(lines))
        self.missing = missing


def _prefer(kind: str, found: list[Path]) -> list[Path]:
    if kind != "diffusion":
        return found
    named = [p for p in found if "z" in p.name.lower() and "image" in p.name.lower()]
    return named + [p for p in found if p not in named]


def resolve(models_dir: Path, kind: str, handle: Any, pick: str) -> Resolution:
    """Resolve one component (see the module docstring for the order)."""
    label = LABELS[kind]
    folder = models_dir / CATEGORIES[kind]
    if handle is not None:
        ref = as_ref(handle, kind, f"Z-Image '{PORTS[kind]}'")
        return Resolution(label, Path(ref.file), [f"the '{PORTS[kind]}' input"])
    looked: list[str] = []
    if pick:
        check_name(pick)
        path = folder / pick
        if path.exists():
            return Resolution(label, path, looked)
        looked.append(f"the pick '{pick}' (not in {folder})")
    env = os.environ.get(ENV[kind], "")
    if env:
        path = Path(env).expanduser()
        if path.exists():
            return Resolution(label, path, looked)
        looked.append(f"{ENV[kind]}={env} (does not exist)")
    else:
        looked.append(f"{ENV[kind]} (unset)")
    recommended = folder / RECOMMENDED[kind]
    if recommended.exists():
        return Resolution(label, recommended, looked)
    found = _prefer(kind, entries(folder))
    if found:
        return Resolution(label, found[0], looked)
    looked.append(f"{RECOMMENDED[kind]} or any weight file or diffusers folder in {folder}")
    return Resolution(label, None, looked)


def resolve_tokenizer(text_encoder: Path) -> Resolution:
    """The tokenizer of the text encoder at ``text_encoder`` (see ``find_tokenizer``)."""
    from inline_primitives import TokenizerMissing

    try:
        return Resolution("Tokenizer", _find_tokenizer(text_encoder))
    except TokenizerMissing as exc:
        looked = [f"{p}/ (tokenizer.json)" for p in exc.looked]
        looked.append(
            f"a single text-encoder file carries none: {PULL_COMMAND} puts Qwen3's in "
            f"text_encoders/{TOKENIZER_FOLDER}/"
        )
        return Resolution("Tokenizer", None, looked)
