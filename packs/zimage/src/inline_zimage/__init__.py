"""The Z-Image pack: ``alibaba/z-image-turbo``, prompt in, image out."""

from inline_sdk import NodeSpec, hookimpl

from ._node import PULL_COMMAND, RECOMMENDED, ModelsMissing, ZImageTurbo

__all__ = ("PULL_COMMAND", "RECOMMENDED", "ModelsMissing", "ZImageTurbo", "inline_nodes")


@hookimpl
def inline_nodes() -> list[NodeSpec]:
    """The nodes of this pack."""
    return [ZImageTurbo]
