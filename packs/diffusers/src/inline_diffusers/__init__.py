"""The diffusers pack: ``diffusers/generate``, any diffusers pipeline folder as a node."""

from inline_sdk import NodeSpec, hookimpl

from ._node import Generate

__all__ = ("Generate", "inline_nodes")


@hookimpl
def inline_nodes() -> list[NodeSpec]:
    """The nodes of this pack."""
    return [Generate]
