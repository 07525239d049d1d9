"""A pack that declares model files only (its nodes are never run)."""

from inline_sdk import NodeSpec, hookimpl


@hookimpl
def inline_nodes() -> list[NodeSpec]:
    """No nodes: the manifest is what the tests read."""
    return []
