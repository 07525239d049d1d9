"""pluggy hook specifications a pack implements (entry point group ``inline.packs``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import pluggy

if TYPE_CHECKING:
    from ._comfyui import ComfyMapping
    from ._node import NodeSpec

PROJECT: Final = "inline"
ENTRY_POINT_GROUP: Final = "inline.packs"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def inline_nodes() -> list[NodeSpec]:  # type: ignore[empty-body]
    """Return the nodes this pack provides (each made with ``@node``)."""


@hookspec
def inline_comfyui_mappings() -> list[ComfyMapping]:  # type: ignore[empty-body]
    """Return how ComfyUI node types map onto this pack's nodes (for ``inline import comfyui``)."""
