"""The models dir's naming rules, shared by the host's catalogs and the packs that load from it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Final, Literal

#: Files that count as weights in a catalog folder (the contract's list, plus ``.sft``).
WEIGHT_SUFFIXES: Final = frozenset(
    {".safetensors", ".sft", ".ckpt", ".pt", ".pth", ".bin", ".gguf", ".onnx"}
)


#: What a ``models/llm/<name>/`` folder runs as: decoder-only or encoder-decoder.
LlmArchitecture = Literal["causal", "seq2seq"]
#: The architectures a node may declare its ``llm`` picker takes (``Param(architecture=...)``).
LLM_ARCHITECTURES: Final[tuple[LlmArchitecture, ...]] = ("causal", "seq2seq")
#: What a ``models/embeddings/<name>/`` folder runs as: a transformers encoder, with or without
#: sentence-transformers' modules (``modules.json``); ComfyUI's textual-inversion files, which
#: share the folder, are not.
ENCODER: Final = "encoder"
#: The architectures a model picker may declare, by the catalog it picks from.
MODEL_ARCHITECTURES: Final[dict[str, tuple[str, ...]]] = {
    "llm": LLM_ARCHITECTURES,
    "embeddings": (ENCODER,),
}


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


def llm_architecture(folder: Path) -> LlmArchitecture | None:
    """``causal`` or ``seq2seq`` from a transformers folder's ``config.json`` (never torch);
    None when it is neither, or has no readable config."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    names = [a for a in config.get("architectures") or [] if isinstance(a, str)]
    if config.get("is_encoder_decoder") or any(
        n.endswith(("ForConditionalGeneration", "MTModel")) for n in names
    ):
        return "seq2seq" if config.get("is_encoder_decoder", True) else None
    if any(n.endswith("ForCausalLM") for n in names) or not names:
        return "causal"
    return None


def is_encoder_folder(folder: Path) -> bool:
    """Whether ``folder`` is a transformers folder an embedding node can load (a
    ``config.json`` at its root, or in the subfolder of its sentence-transformers
    ``Transformer`` module); never torch."""
    if not folder.is_dir():
        return False
    if (folder / "config.json").is_file():
        return True
    try:
        modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(modules, list):
        return False
    for module in modules:
        if isinstance(module, dict) and str(module.get("type", "")).endswith("Transformer"):
            path = module.get("path")
            if isinstance(path, str) and ".." not in Path(path).parts:
                return (folder / path / "config.json").is_file()
    return False
