"""The basics pack: torch-free nodes that prove the engine's loop end to end."""

from inline_sdk import NodeSpec, hookimpl

from ._image import input_image, input_video, resize_image
from ._text import input_text, join_text

__all__ = ("inline_nodes",)


@hookimpl
def inline_nodes() -> list[NodeSpec]:
    """The nodes of this pack."""
    return [input_text, input_image, input_video, join_text, resize_image]
