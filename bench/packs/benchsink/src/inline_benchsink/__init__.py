"""Benchmark node: receives a large buffer from another worker and checks it arrived."""

from typing import Annotated

from inline_sdk import Context, Image, NodeSpec, Output, Port, hookimpl, node


@node("benchsink/consume", title="Consume", category="Bench")
def consume(
    ctx: Context, image: Annotated[Image, Port("Image")]
) -> Annotated[str, Output("text", "Text")]:
    view = memoryview(image.data).cast("B")
    # read one byte of every page: the mapping is really there, without a copy of it
    sample = bytes(view[::4096])
    return f"{len(view)} {sum(sample) % 256} {view[-1]}"


@hookimpl
def inline_nodes() -> list[NodeSpec]:
    return [consume]
