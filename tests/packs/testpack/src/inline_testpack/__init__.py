"""Test nodes: echo, noise, wait for cancel, a gate the test opens, fail, hang, crash, meet in
parallel, big blobs, streamed text, sleep."""

import ctypes
import gc
import os
import sys
import threading
import time
import weakref
from typing import Annotated, Any, NamedTuple

from inline_sdk import (
    ComfyMapping,
    Context,
    Image,
    NodeSpec,
    Output,
    Param,
    Port,
    hookimpl,
    node,
)
from inline_sdk.protocol import ModelSize

_live: "weakref.WeakSet[Tracked]" = weakref.WeakSet()
_barriers: dict[tuple[str, int], threading.Barrier] = {}
_lock = threading.Lock()


@node("testpack/echo", title="Echo", category="Test")
def echo(
    ctx: Context,
    text: Annotated[str, Port("Text")],
    *,
    suffix: Annotated[str, Param("Suffix")] = "",
) -> Annotated[str, Output("text", "Text")]:
    return text + suffix


@node("testpack/noisy", title="Noisy", category="Test")
def noisy(
    ctx: Context, *, lines: Annotated[int, Param("Lines", min=0)] = 1000
) -> Annotated[str, Output("text", "Text")]:
    for i in range(lines):
        print(f"noise {i} \x00\x01 {'x' * 100}")
    sys.stdout.flush()
    os.write(1, b"\x00\x00\x00\x10raw bytes on fd 1\n")
    return "still fine"


@node("testpack/wait", title="Wait for cancel", category="Test")
def wait(
    ctx: Context, *, seconds: Annotated[float, Param("Seconds", min=0)] = 600.0
) -> Annotated[str, Output("text", "Text")]:
    deadline = time.monotonic() + seconds
    step = 0
    while time.monotonic() < deadline:
        step += 1
        ctx.progress(step, 1_000_000, status=f"waiting {step}")
        if ctx.wait_cancelled(0.02):
            ctx.check_cancelled()
    return f"waited {step} steps"


@node("testpack/gate", title="Gate", category="Test", output_kind="image")
def gate(
    ctx: Context,
    *,
    file: Annotated[str, Param("Opens when this file exists")] = "",
    tag: Annotated[str, Param("Tag")] = "",
) -> Annotated[Image, Output("image", "Image")]:
    """Held until the test creates ``file`` (or the call is cancelled): a test decides when
    the call ends, without a timer."""
    step = 0
    while not os.path.exists(file):
        step += 1
        ctx.progress(step, 1_000_000, status="held")
        if ctx.wait_cancelled(0.02):
            ctx.check_cancelled()
    return Image(b"\x89PNG\r\n\x1a\n" + tag.encode())


@node("testpack/read-model", title="Read a model file", category="Test")
def read_model(
    ctx: Context,
    *,
    file: Annotated[str, Param("VAE file", options_from="vae")] = "",
) -> Annotated[str, Output("text", "Text")]:
    """The picked file's bytes, as text: what a loader would load, so a test sees a stale
    cache answer for what it is."""
    folder = ctx.models_dir / "vae"
    if not file:  # an empty pick loads the first file, as the loaders do
        file = sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))[0]
    return (folder / file).read_bytes().decode("utf-8", "replace")


@node("testpack/secret-length", title="Secret length", category="Test")
def secret_length(
    ctx: Context, *, key_secret: Annotated[str, Param("Key secret")] = "TESTPACK_KEY"
) -> Annotated[str, Output("text", "Text")]:
    """How long the secret the call got is (never the value), or why it got none."""
    try:
        return f"got {len(ctx.secret(key_secret))} characters"
    except Exception as exc:
        return f"none ({type(exc).__name__})"


@node("testpack/fail", title="Fail", category="Test")
def fail(
    ctx: Context,
    *,
    message: Annotated[str, Param("Message")] = "boom",
    after: Annotated[str, Param("Fail once this file exists")] = "",
) -> Annotated[str, Output("text", "Text")]:
    while after and not os.path.exists(after):
        if ctx.wait_cancelled(0.01):
            ctx.check_cancelled()

    def deep() -> str:
        raise ValueError(message)

    return deep()


@node("testpack/hang", title="Hang", category="Test")
def hang(ctx: Context) -> Annotated[str, Output("text", "Text")]:
    threading.Event().wait()  # never checks for cancellation
    return "unreachable"


@node("testpack/segfault", title="Segfault", category="Test")
def segfault(ctx: Context) -> Annotated[str, Output("text", "Text")]:
    ctypes.string_at(0)
    return "unreachable"


@node("testpack/meet", title="Meet", category="Test", concurrency=8)
def meet(
    ctx: Context,
    *,
    group: Annotated[str, Param("Group")] = "g",
    parties: Annotated[int, Param("Parties", min=1)] = 3,
    tag: Annotated[str, Param("Tag")] = "",
) -> Annotated[str, Output("text", "Text")]:
    with _lock:
        barrier = _barriers.setdefault((group, parties), threading.Barrier(parties))
    index = barrier.wait(timeout=30)  # raises BrokenBarrierError unless all calls overlap
    return f"met {parties} ({tag}, {index})"


@node("testpack/blob", title="Blob", category="Test", output_kind="image")
def blob(
    ctx: Context, *, mib: Annotated[float, Param("MiB", min=0)] = 1.0
) -> Annotated[Image, Output("image", "Image")]:
    size = int(mib * 1024 * 1024)
    data = bytearray(size)
    if size:
        data[0], data[-1] = 7, 9
    return Image(data, "bin")


class Tracked:
    """An engine object whose lifetime the tests watch."""

    def __init__(self, label: str) -> None:
        self.label = label
        _live.add(self)


class Made(NamedTuple):
    model: Annotated[Any, Output(label="Model", kind="model")]
    ident: str


@node("testpack/make-model", title="Make model", category="Test")
def make_model(ctx: Context, *, label: Annotated[str, Param("Label")] = "m") -> Made:
    obj = Tracked(label)
    return Made(obj, str(id(obj)))


class Pair(NamedTuple):
    first: Annotated[str, Output(label="First")]
    second: Annotated[str, Output(label="Second")]


@node("testpack/pair", title="Pair of texts", category="Test", output_kind="text")
def pair(ctx: Context, *, text: Annotated[str, Param("Text")] = "x") -> Pair:
    """Two text outputs: ``text`` upper-cased and reversed (takes that must say which is which)."""
    return Pair(text.upper(), text[::-1])


@node("testpack/warmed", title="Warmed", category="Test", output_kind="text")
class Warmed:
    """Says what its warm hook loaded (``tag``), or ``cold`` when none ran in this worker; a
    ``tag`` of ``fail`` fails the warm-up as a model that cannot load does."""

    def __init__(self) -> None:
        self.loaded: list[str] = []

    def warm(self, ctx: Context, *, tag: str) -> None:
        if tag == "fail":
            raise FileNotFoundError(f"no model '{tag}' here")
        self.loaded.append(tag)

    def run(
        self, ctx: Context, *, tag: Annotated[str, Param("Tag")] = "t"
    ) -> Annotated[str, Output("text", "Text")]:
        return "warmed " + ",".join(self.loaded) if self.loaded else "cold"


@node("testpack/use-model", title="Use model", category="Test")
def use_model(
    ctx: Context, model: Annotated[Any, Port("Model", kind="model")]
) -> Annotated[str, Output("text", "Text")]:
    return str(id(model))


@node("testpack/place", title="Place", category="Test")
def place(
    ctx: Context, *, mib: Annotated[int, Param("MiB", min=1)] = 1
) -> Annotated[str, Output("text", "Text")]:
    """Asks the host's memory broker where a model of ``mib`` MiB goes: its device, or
    ``unbrokered``."""
    size = ModelSize(name="testpack-model", role="other", params=mib << 18, bytes=mib << 20)
    placed = ctx.memory.place([size])
    if placed is None:
        return "unbrokered"
    return ",".join(c.device for c in placed.components) if placed.fits else placed.reason


@node("testpack/live-models", title="Live models", category="Test")
def live_models(
    ctx: Context, *, nonce: Annotated[int, Param("Nonce")] = 0
) -> Annotated[str, Output("text", "Text")]:
    gc.collect()
    return str(len(_live))


@node("testpack/preview", title="Preview", category="Test", output_kind="image")
def preview(ctx: Context) -> Annotated[Image, Output("image", "Image")]:
    png = b"\x89PNG\r\n\x1a\npreview"
    ctx.preview(png)
    ctx.progress(1, 1)
    return Image(png)


@node("testpack/spam", title="Spam progress", category="Test", output_kind="image")
def spam(
    ctx: Context,
    prompt: Annotated[str | None, Port("Prompt")] = None,
    *,
    events: Annotated[int, Param("Events", min=1)] = 2000,
    gate: Annotated[str, Param("Gate file")] = "",
) -> Annotated[Image, Output("image", "Image")]:
    """``events`` progress reports as fast as it can; first, with ``gate``, it waits until that
    file exists (so a test can subscribe before the first) or the call is cancelled."""
    while gate and not os.path.exists(gate):
        if ctx.wait_cancelled(0.01):
            ctx.check_cancelled()
    for i in range(events):
        ctx.progress(i + 1, events, status="x" * 2000)
    return Image(b"\x89PNG\r\n\x1a\nspam" + str(events).encode())


@node("testpack/stream", title="Stream text", category="Test", output_kind="text", concurrency=16)
def stream(
    ctx: Context,
    *,
    words: Annotated[int, Param("Words", min=0)] = 10,
    hold_after: Annotated[int, Param("Hold after", min=-1)] = -1,
    gate: Annotated[str, Param("Gate file")] = "",
    piece_kib: Annotated[int, Param("Piece KiB", min=0)] = 0,
) -> Annotated[str, Output("text", "Text")]:
    """Streams ``words`` tokens; after ``hold_after`` of them, waits until ``gate`` exists (so a
    test can connect a reader mid-stream) or the call is cancelled."""
    out = []
    for i in range(words):
        if i == hold_after and gate:
            while not os.path.exists(gate):
                if ctx.wait_cancelled(0.01):
                    ctx.check_cancelled()
        piece = f"w{i} " if i % 3 else f"wörd{i}\n"
        if piece_kib:
            piece = "x" * (piece_kib << 10)
        ctx.check_cancelled()
        out.append(piece)
        ctx.stream("text", piece)
    return "".join(out)


@node("testpack/sleep", title="Sleep", category="Test")
def sleep(
    ctx: Context,
    *,
    seconds: Annotated[float, Param("Seconds", min=0)] = 3.0,
    tag: Annotated[str, Param("Tag")] = "",
) -> Annotated[str, Output("text", "Text")]:
    """A slow node that honours cancel: the benchmarks' slow run."""
    if ctx.wait_cancelled(seconds):
        ctx.check_cancelled()
    return f"slept {seconds} ({tag})"


@hookimpl
def inline_nodes() -> list[NodeSpec]:
    return [
        echo,
        noisy,
        wait,
        gate,
        read_model,
        secret_length,
        fail,
        hang,
        segfault,
        meet,
        blob,
        make_model,
        use_model,
        live_models,
        place,
        preview,
        spam,
        stream,
        sleep,
        pair,
        Warmed,
    ]


@hookimpl
def inline_comfyui_mappings() -> list[ComfyMapping]:
    """A custom ComfyUI output node onto testpack/echo (the importer's pack vocabulary)."""
    return [
        ComfyMapping(
            class_type="TestEchoText",
            node="testpack/echo",
            inputs={"text": "text"},
            params={"suffix": "suffix"},
            outputs=["text"],
            widgets=["suffix"],
            output=True,
        )
    ]
