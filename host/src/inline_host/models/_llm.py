"""The ``llm`` catalog narrowed by architecture (read from ``config.json``, never torch).

``models/llm/<name>/`` holds transformers folders. A node's picker lists only the folders whose
architecture fits it: decoder-only for ``text/complete``, encoder-decoder for ``text/rewrite``
(the contract lets a node's provider narrow its catalog, 3.5).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

if TYPE_CHECKING:
    from ._catalogs import ModelCatalogs

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
