"""Nodes written against SDK 1.0.0: text in and out, and an image big enough for shared memory."""

from typing import Annotated

from inline_sdk import Context, Image, NodeSpec, Output, Param, Port, hookimpl, node


@node("oldpack/shout", title="Shout", category="Test")
def shout(
    ctx: Context,
    text: Annotated[str, Port("Text")],
    *,
    marks: Annotated[int, Param("Marks", min=0, max=9)] = 1,
) -> Annotated[str, Output("text", "Text")]:
    ctx.progress(1, 1)
    return text.upper() + "!" * marks


@node("oldpack/canvas", title="Canvas", category="Test", output_kind="image")
def canvas(
    ctx: Context, *, kib: Annotated[int, Param("KiB", min=1)] = 512
) -> Annotated[Image, Output("image", "Image")]:
    data = bytearray(kib * 1024)
    data[0], data[-1] = 1, 2
    return Image(data, "bin")


@hookimpl
def inline_nodes() -> list[NodeSpec]:
    return [shout, canvas]
