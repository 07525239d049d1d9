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
from typing import Final

import msgspec
from inline_registry import NodeManifest
from inline_sdk import (
    ENCODER,
    Descriptor,
    LlmArchitecture,
    ModelStatus,
    Option,
    UnsafeName,
    check_model_name,
    is_encoder_folder,
    is_weight_entry,
    llm_architecture,
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
        # llm folder -> (its config.json's stamp, the architecture read from it)
        self._archs: dict[Path, tuple[tuple[int, int], LlmArchitecture | None]] = {}

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

    def forget(self) -> None:
        """Scan every category again on its next read: after a removal this process made,
        which a folder's mtime may not tell apart (one clock tick holds both)."""
        self._cache.clear()

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

    def architecture(self, folder: Path) -> LlmArchitecture | None:
        """The architecture of an ``llm`` folder, read again only when its ``config.json``
        changed (a stat per call, not a read and a parse)."""
        try:
            st = (folder / "config.json").stat()
            stamp = (st.st_mtime_ns, st.st_size)
        except OSError:
            stamp = (-1, -1)
        cached = self._archs.get(folder)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        arch = llm_architecture(folder)
        self._archs[folder] = (stamp, arch)
        return arch

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
        arch = descriptor.architecture(field.key)  # an llm picker: the architecture it declares
        names = narrow(field.options_from, arch, names, catalogs)
        options = field.options + tuple(
            Option(value=n, label=demo_label(catalogs, field.options_from, n)) for n in names
        )
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


#: What ``inline demo models`` writes on a demo model's card (a folder's ``inline.json``, a single
#: file's ``<file>.inline.json``): pickers label such an entry "NAME (demo)".
DEMO_KEY: Final = "demo"


def is_demo(path: Path) -> bool:
    """Whether the model at ``path`` is a demo model (tiny random weights), by its card."""
    card = path / "inline.json" if path.is_dir() else path.with_name(f"{path.name}.inline.json")
    try:
        data = json.loads(card.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(data, dict) and data.get(DEMO_KEY) is True


def demo_label(catalogs: ModelCatalogs, category: str, name: str) -> str:
    """A picker's label for entry ``name``: the name, with " (demo)" for a demo model."""
    path = catalogs.find(category, name)
    return f"{name} (demo)" if path is not None and is_demo(path) else name


# The ``llm`` catalog narrowed by architecture (the SDK's rule over ``config.json``, never
# torch): ``models/llm/<name>/`` holds transformers folders; a node's picker lists only the
# folders of the architecture its param declares (``Param(architecture=...)``; the contract lets
# a node's provider narrow its catalog, 3.5).
CATEGORY: Final = "llm"


def llm_entries(catalogs: ModelCatalogs, arch: str) -> tuple[str, ...]:
    """The ``llm`` folders of ``arch``."""
    out = []
    for name in catalogs.entries(CATEGORY):
        folder = catalogs.find(CATEGORY, name)
        if folder is not None and folder.is_dir() and catalogs.architecture(folder) == arch:
            out.append(name)
    return tuple(out)


def narrow(
    category: str, arch: str | None, names: Sequence[str], catalogs: ModelCatalogs
) -> Sequence[str]:
    """``names`` of ``category`` as a picker declaring ``arch`` shows them (an ``llm`` picker
    that declares none, as in packs built before the declaration, shows them all)."""
    if arch is None or category not in (CATEGORY, ENCODERS):
        return names
    if category == CATEGORY:
        fitting = set(llm_entries(catalogs, arch))
    else:
        fitting = set(encoder_entries(catalogs)) if arch == ENCODER else set()
    return [n for n in names if n in fitting]


# ``models/embeddings/`` holds ComfyUI's textual-inversion files and, for embedding nodes,
# encoder folders (transformers or sentence-transformers): a picker that declares
# ``architecture="encoder"`` lists only those.
ENCODERS: Final = "embeddings"


def encoder_entries(catalogs: ModelCatalogs) -> tuple[str, ...]:
    """The encoder folders of ``models/embeddings/`` (the SDK's ``is_encoder_folder``)."""
    out = []
    for name in catalogs.entries(ENCODERS):
        folder = catalogs.find(ENCODERS, name)
        if folder is not None and is_encoder_folder(folder):
            out.append(name)
    return tuple(out)
