"""A second pack: reads bytes another worker produced, through shared memory."""

from typing import Annotated

from inline_sdk import Context, Image, NodeSpec, Output, Port, hookimpl, node


@node("otherpack/measure", title="Measure", category="Test")
def measure(
    ctx: Context, image: Annotated[Image, Port("Image")]
) -> Annotated[str, Output("text", "Text")]:
    view = memoryview(image.data).cast("B")
    touched = bytes(view[::4096])  # touch every page of the mapping
    first = view[0] if len(view) else -1
    last = view[-1] if len(view) else -1
    return f"{len(view)} bytes, first {first}, last {last}, pages {len(touched)}"


@hookimpl
def inline_nodes() -> list[NodeSpec]:
    return [measure]
