"""Benchmark nodes: a trivial node, and a producer of large buffers."""

import time
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


@node("benchpack/ticker", title="Ticker", category="Bench", output_kind="image")
def ticker(
    ctx: Context,
    *,
    seconds: Annotated[float, Param("Seconds", min=0)] = 10.0,
    interval: Annotated[float, Param("Interval", min=0.001)] = 0.05,
) -> Annotated[Image, Output("image", "Image")]:
    """Progress events stamped with the wall clock at emission (for event latency)."""
    steps = max(1, int(seconds / interval))
    for i in range(steps):
        ctx.progress(i + 1, steps, status=str(time.time_ns()))
        time.sleep(interval)
    return Image(b"\x89PNG\r\n\x1a\nticker")


@hookimpl
def inline_nodes() -> list[NodeSpec]:
    return [noop, produce, ticker]
