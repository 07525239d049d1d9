"""The mesh pack: ``mesh/relief``, an image as a watertight relief (heightfield) mesh."""

from inline_sdk import NodeSpec, hookimpl

from ._relief import Relief, relief_arrays

__all__ = ("Relief", "inline_nodes", "relief_arrays")


@hookimpl
def inline_nodes() -> list[NodeSpec]:
    """The nodes of this pack."""
    return [Relief.spec]
