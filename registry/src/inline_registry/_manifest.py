"""The pack manifest: ``[tool.inline]`` in a pack's ``pyproject.toml``, validated strictly.

Example::

    [tool.inline]
    sdk = "1"                                   # the SDK major the pack is built for

    [tool.inline.nodes."alibaba/z-image-turbo"]
    enabled = true

    [[tool.inline.nodes."alibaba/z-image-turbo".models]]
    label = "Diffusion model"                   # shown in errors and model popups
    param = "model"                             # the picker param this file answers
    category = "diffusion_models"               # the models/ subfolder (a catalog name)
    file = "z_image_turbo_bf16.safetensors"     # its name in that folder
    repo = "Comfy-Org/z_image_turbo"            # where `inline models pull` fetches it
    path = "split_files/diffusion_models/z_image_turbo_bf16.safetensors"   # path in the repo
    size = 12309866400                          # exact bytes (`inline models pull` verifies them)

A folder entry (a tokenizer, a diffusers folder) names the files to fetch from the repo folder
``path`` with ``files = ["tokenizer.json", ...]``; they are saved under ``<category>/<file>/``.

Files people write reject unknown keys (a typo is an error naming the key), and every problem is
reported at once with its path.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import msgspec

from ._errors import PackInvalid

CATALOGS = frozenset(
    {
        "diffusion_models", "checkpoints", "vae", "text_encoders", "loras", "clip_vision",
        "controlnet", "upscale_models", "latent_upscale_models", "model_patches", "embeddings",
        "annotators", "characters", "diffusers", "llm",
    }
)  # fmt: skip


class ModelFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A model file (or folder) a node needs, and where to fetch it."""

    label: str
    category: str
    file: str
    repo: str | None = None
    path: str | None = None
    revision: str | None = None
    size: int | None = None
    param: str | None = None
    required: bool = True
    files: tuple[str, ...] = ()


class NodeManifest(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """What the manifest says of one node type."""

    enabled: bool = True
    models: tuple[ModelFile, ...] = ()


class Manifest(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A pack's ``[tool.inline]`` table."""

    sdk: str = "1"
    #: Whether the pack's workers may reach the network (a sandboxed worker has none else).
    network: bool = False
    #: The models dirs' categories (subfolders) its workers read; None: every one. A sandboxed
    #: worker sees only these (``model_categories = ["llm"]``; ``[]``: no models at all).
    model_categories: tuple[str, ...] | None = None
    nodes: dict[str, NodeManifest] = msgspec.field(default_factory=dict)


def parse_manifest(data: Any, where: str) -> Manifest:
    """Validate a ``[tool.inline]`` table; raises ``PackInvalid`` listing every problem."""
    problems: list[str] = []
    _walk(data if data is not None else {}, Manifest, "tool.inline", problems)
    if problems:
        raise PackInvalid(where, "invalid [tool.inline] manifest:\n  - " + "\n  - ".join(problems))
    manifest = msgspec.convert(data or {}, Manifest)
    return manifest


def read_manifest(pack_dir: Path) -> Manifest:
    """The manifest of the pack project at ``pack_dir`` (empty when it has none)."""
    pyproject = pack_dir / "pyproject.toml"
    try:
        data = tomllib.loads(pyproject.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise PackInvalid(str(pack_dir), f"cannot read pyproject.toml: {exc}") from exc
    return parse_manifest(data.get("tool", {}).get("inline"), str(pack_dir))


def _walk(data: Any, struct: type[msgspec.Struct], path: str, problems: list[str]) -> None:
    """Collect every problem (msgspec alone stops at the first one)."""
    if not isinstance(data, dict):
        problems.append(f"{path}: expected a table, got {type(data).__name__}")
        return
    fields = {f.encode_name: f for f in msgspec.structs.fields(struct)}
    for key, value in data.items():
        where = f"{path}.{key}"
        field = fields.get(key)
        if field is None:
            problems.append(f"{where}: unknown key '{key}' (known: {', '.join(sorted(fields))})")
            continue
        if struct is Manifest and key == "nodes":
            if not isinstance(value, dict):
                problems.append(f"{where}: expected a table of node types")
                continue
            for node_type, node in value.items():
                _walk(node, NodeManifest, f'{where}."{node_type}"', problems)
            continue
        if struct is NodeManifest and key == "models":
            if not isinstance(value, list):
                problems.append(f"{where}: expected an array of tables")
                continue
            for i, item in enumerate(value):
                _walk(item, ModelFile, f"{where}[{i}]", problems)
                if isinstance(item, dict) and item.get("category") not in CATALOGS:
                    problems.append(
                        f"{where}[{i}].category: '{item.get('category')}' is not a catalog "
                        f"(one of {', '.join(sorted(CATALOGS))})"
                    )
            continue
        try:
            msgspec.convert(value, field.type)
        except msgspec.ValidationError as exc:
            problems.append(f"{where}: {exc}")
            continue
        if struct is Manifest and key == "model_categories":
            problems.extend(
                f"{where}: '{c}' is not a catalog (one of {', '.join(sorted(CATALOGS))})"
                for c in value or ()  # null: every category (a stored manifest says so)
                if c not in CATALOGS
            )
    missing = [f.encode_name for f in fields.values() if f.required and f.encode_name not in data]
    problems.extend(f"{path}.{name}: required key is missing" for name in missing)
