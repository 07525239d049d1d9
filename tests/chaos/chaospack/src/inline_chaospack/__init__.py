"""Chaos nodes: lone surrogates in replies, grandchild processes, outputs of any size, model
handles that know the worker that made them."""

import os
import subprocess
import sys
import time
from typing import Annotated, Any, NamedTuple

from inline_sdk import AssetRef, Context, Image, NodeSpec, Output, Param, Port, hookimpl, node

LONE = b"caf\xe9".decode("utf-8", "surrogateescape")  # 'caf\udce9': not encodable as UTF-8


@node("chaos/surrogate", title="Lone surrogate", category="Test")
def surrogate(
    ctx: Context,
    *,
    mode: Annotated[str, Param("Mode")] = "return",
    nonce: Annotated[int, Param("Nonce")] = 0,
) -> Annotated[str, Output("text", "Text")]:
    if mode == "raise":
        raise ValueError(f"bad name {LONE}")
    return f"name {LONE}"


@node("chaos/stubborn", title="Ignore cancel", category="Test")
def stubborn(
    ctx: Context, *, nonce: Annotated[int, Param("Nonce")] = 0
) -> Annotated[str, Output("text", "Text")]:
    ctx.progress(1, 2, status="started")
    while True:  # never checks for cancellation
        time.sleep(0.05)


@node("chaos/path", title="Name a file", category="Test")
def path(
    ctx: Context, *, file: Annotated[AssetRef | None, Param("File", internal=True)] = None
) -> Annotated[str, Output("text", "Text")]:
    return "named" if file is not None else "none"  # never reads it: the host hashes it


@node("chaos/grandchild", title="Leave a grandchild", category="Test")
def grandchild(
    ctx: Context, *, nonce: Annotated[int, Param("Nonce")] = 0
) -> Annotated[str, Output("text", "Text")]:
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return str(child.pid)


@node("chaos/big", title="Big output", category="Test", output_kind="image")
def big(
    ctx: Context,
    *,
    mib: Annotated[float, Param("MiB", min=0)] = 16.0,
    nonce: Annotated[int, Param("Nonce")] = 0,
) -> Annotated[Image, Output("image", "Image")]:
    data = bytearray(int(mib * 1024 * 1024))
    if data:
        data[0], data[-1] = nonce % 256, 9
    return Image(data, "bin")


class Model:
    """An engine object that remembers its label and the worker process that made it."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.pid = os.getpid()


class Made(NamedTuple):
    model: Annotated[Any, Output(label="Model", kind="model")]
    text: Annotated[str, Output(label="Made")]


@node("chaos/make-model", title="Make a model", category="Test", output_kind="text")
def make_model(ctx: Context, *, label: Annotated[str, Param("Label")] = "m") -> Made:
    model = Model(label)
    return Made(model, f"{label} made by {model.pid}")


@node("chaos/use-model", title="Use a model", category="Test")
def use_model(
    ctx: Context,
    model: Annotated[Any, Port("Model", kind="model")],
    after: Annotated[Image | None, Port("After")] = None,
) -> Annotated[str, Output("text", "Text")]:
    """Which model it got, who made it and who uses it; ``after`` only orders it after another
    node (a gate the test opens)."""
    return f"{model.label} made by {model.pid} used by {os.getpid()}"


@hookimpl
def inline_nodes() -> list[NodeSpec]:
    return [surrogate, stubborn, path, grandchild, big, make_model, use_model]
