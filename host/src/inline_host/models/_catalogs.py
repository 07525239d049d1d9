"""Model catalogs: the folders of the models roots (ComfyUI layout), scanned on demand.

A catalog is one subfolder (``diffusion_models``, ``vae``, ...). Weight files are listed by bare
name, folders holding weights (diffusers layouts, shards) by folder name. A category is rescanned
when its folder's mtime changes, so a file dropped in while the host runs appears without a
restart. Names with path traversal are refused.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Final, Literal

import msgspec
from inline_registry import NodeManifest
from inline_sdk import (
    Descriptor,
    ModelStatus,
    Option,
    UnsafeName,
    check_model_name,
    is_weight_entry,
)

CATEGORIES: Final = (
    "diffusion_models", "checkpoints", "vae", "text_encoders", "loras", "clip_vision",
    "controlnet", "upscale_models", "latent_upscale_models", "model_patches", "embeddings",
    "annotators", "characters", "llm", "diffusers",
)  # fmt: skip


# The naming rules are the SDK's, so packs that load from the models dir apply the same ones.
check_name = check_model_name


class ModelCatalogs:
    """The entries of every category across the models roots (the first root is writable)."""

    def __init__(self, roots: Sequence[Path]) -> None:
        self.roots = tuple(roots)
        self._cache: dict[str, tuple[tuple[int, ...], tuple[str, ...]]] = {}

    def ensure_folders(self) -> None:
        """Create every category folder under the writable root."""
        for category in CATEGORIES:
            (self.roots[0] / category).mkdir(parents=True, exist_ok=True)

    def entries(self, category: str) -> tuple[str, ...]:
        """Sorted entry names of ``category`` (first root wins on duplicates)."""
        folders = [root / category for root in self.roots]
        stamp = tuple(f.stat().st_mtime_ns if f.is_dir() else -1 for f in folders)
        cached = self._cache.get(category)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        names: set[str] = set()
        for folder in folders:
            if not folder.is_dir():
                continue
            for child in folder.iterdir():
                if child.name.startswith("."):
                    continue
                if category == "characters":
                    if child.is_file() and child.suffix == ".char":
                        names.add(child.name)
                elif is_weight_entry(child):
                    names.add(child.name)
        listing = tuple(sorted(names))
        self._cache[category] = (stamp, listing)
        return listing

    def find(self, category: str, name: str) -> Path | None:
        """The path of entry ``name`` of ``category``, or None; raises ``UnsafeName``."""
        check_name(name)
        for root in self.roots:
            path = root / category / name
            if path.exists():
                return path
        return None

    def has(self, category: str, name: str) -> bool:
        """Whether entry ``name`` exists in ``category`` (a weight file, or any folder: a
        tokenizer folder holds no weights but is still a model component)."""
        try:
            return self.find(category, name) is not None
        except UnsafeName:
            return False

    def fingerprint(self, categories: Sequence[str] = CATEGORIES) -> str:
        """A short hash of the listings (part of the registry version clients cache by)."""
        h = hashlib.sha256()
        for category in categories:
            h.update(category.encode())
            h.update("\0".join(self.entries(category)).encode())
        return h.hexdigest()[:8]


def serve_descriptor(
    descriptor: Descriptor, manifest: NodeManifest | None, catalogs: ModelCatalogs
) -> Descriptor:
    """The descriptor as served now: pickers filled from the catalogs, defaults resolved to the
    file the node would load, and which of its model files are present."""
    recommended = {m.param: m for m in manifest.models if m.param} if manifest else {}
    params = []
    for field in descriptor.params:
        if field.options_from is None:
            params.append(field)
            continue
        names = catalogs.entries(field.options_from)
        names = narrow(descriptor.type, field.options_from, names, catalogs)  # llm: by architecture
        options = field.options + tuple(Option(value=n, label=n) for n in names)
        default = field.default
        rec = recommended.get(field.key)
        if rec is not None and names:
            default = rec.file if rec.file in names else names[0]
        params.append(msgspec.structs.replace(field, options=options, default=default))
    models = tuple(
        ModelStatus(
            label=m.label,
            category=m.category,
            file=m.file,
            present=catalogs.has(m.category, m.file),
            required=m.required,
            param=m.param,
            repo=m.repo,
            path=m.path,
            size=m.size,
        )
        for m in (manifest.models if manifest else ())
    )
    return msgspec.structs.replace(descriptor, params=tuple(params), models=models)


# The ``llm`` catalog narrowed by architecture (read from ``config.json``, never torch):
# ``models/llm/<name>/`` holds transformers folders; a node's picker lists only the folders
# whose architecture fits it (the contract lets a node's provider narrow its catalog, 3.5).
Arch = Literal["causal", "seq2seq"]
CATEGORY: Final = "llm"
#: The architecture each text node runs.
NODE_ARCH: Final[dict[str, Arch]] = {"text/complete": "causal", "text/rewrite": "seq2seq"}


def architecture(folder: Path) -> Arch | None:
    """``causal`` or ``seq2seq`` from the folder's ``config.json``; None if neither (or none)."""
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


def llm_entries(catalogs: ModelCatalogs, arch: Arch) -> tuple[str, ...]:
    """The ``llm`` folders of ``arch``."""
    out = []
    for name in catalogs.entries(CATEGORY):
        folder = catalogs.find(CATEGORY, name)
        if folder is not None and folder.is_dir() and architecture(folder) == arch:
            out.append(name)
    return tuple(out)


def narrow(
    node_type: str, category: str, names: Sequence[str], catalogs: ModelCatalogs
) -> Sequence[str]:
    """``names`` as ``node_type``'s picker shows them (the ``llm`` catalog by architecture)."""
    arch = NODE_ARCH.get(node_type)
    if category != CATEGORY or arch is None:
        return names
    fitting = set(llm_entries(catalogs, arch))
    return [n for n in names if n in fitting]
