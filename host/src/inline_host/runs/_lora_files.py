"""Which LoRA files a node reads, so their content hashes enter its cache key.

The engine calls this from its fingerprint. A param picked from the ``loras`` catalog names a
file under ``models/loras/``; an empty pick means the first weight file there, as the loader
resolves it.
"""

from __future__ import annotations

from typing import Any

from inline_sdk import UnsafeName, check_model_name, is_weight_entry


def lora_files(registry: Any, node: Any, settings: Any) -> list[str]:
    """Paths of the LoRA files ``node``'s params name (none for nodes without a LoRA picker)."""
    entry = registry.lookup(node.type) if registry is not None else None
    if entry is None:
        return []
    folder = settings.models_dir / "loras"
    found: list[str] = []
    for param in entry.descriptor.params:
        if param.options_from != "loras":
            continue
        name = node.params.get(param.key, param.default)
        if isinstance(name, str) and name:
            try:
                check_model_name(name)
            except UnsafeName:
                continue
            found.append(str(folder / name))
        elif folder.is_dir():
            first = sorted(
                p for p in folder.iterdir() if not p.name.startswith(".") and is_weight_entry(p)
            )
            found += [str(first[0])] if first else []
    return found
