"""Benchmark nodes: a trivial node, and a producer of large buffers."""

from typing import Annotated

from inline_sdk import Context, Image, NodeSpec, Output, Param, hookimpl, node

_buffers: dict[int, bytes] = {}


@node("benchpack/noop", title="No-op", category="Bench")
def noop(
    ctx: Context, *, n: Annotated[int, Param("N")] = 0
) -> Annotated[str, Output("text", "Text")]:
    return "ok"


@node("benchpack/produce", title="Produce", category="Bench", output_kind="image")
def produce(
    ctx: Context, *, mib: Annotated[int, Param("MiB", min=1)] = 64, nonce: int = 0
) -> Annotated[Image, Output("image", "Image")]:
    data = _buffers.get(mib)
    if data is None:  # made once, so the benchmark times the transfer, not the making
        data = _buffers[mib] = bytes(range(256)) * (mib * 4096)
    return Image(data, "bin")


@hookimpl
def inline_nodes() -> list[NodeSpec]:
    return [noop, produce]
