"""Benchmark nodes: a trivial node, a producer of large buffers, a ticker, a sleeper, a streamer."""

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


@node("benchpack/sleep", title="Sleep", category="Bench")
def sleep(
    ctx: Context, *, seconds: Annotated[float, Param("Seconds", min=0)] = 3.0
) -> Annotated[str, Output("text", "Text")]:
    """A slow node (the concurrency benchmark's long run); honours cancel."""
    if ctx.wait_cancelled(seconds):
        ctx.check_cancelled()
    return f"slept {seconds}"


@node("benchpack/stream", title="Stream", category="Bench", output_kind="text")
def stream(
    ctx: Context,
    *,
    deltas: Annotated[int, Param("Deltas", min=1)] = 2000,
    gate: Annotated[str, Param("Gate file")] = "",
    interval_ms: Annotated[float, Param("Interval (ms)", min=0)] = 0.0,
) -> Annotated[str, Output("text", "Text")]:
    """Streams ``deltas`` pieces, each the wall clock (ns) at emission, one per ``interval_ms``
    (0: as fast as it can); starts once ``gate`` exists, so the reader is connected first."""
    import os

    while gate and not os.path.exists(gate):
        if ctx.wait_cancelled(0.005):
            ctx.check_cancelled()
    out = []
    next_at = time.perf_counter()
    for _ in range(deltas):
        if interval_ms:
            next_at += interval_ms / 1000
            while time.perf_counter() < next_at:  # paced like a (very fast) token stream
                pass
        piece = f"{time.time_ns()} "
        ctx.stream("text", piece)
        out.append(piece)
    return "".join(out)


@hookimpl
def inline_nodes() -> list[NodeSpec]:
    return [noop, produce, ticker, sleep, stream]
