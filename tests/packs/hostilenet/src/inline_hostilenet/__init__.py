"""The hostile pack's network node, in a pack whose manifest says ``network = true``, and a file
reader in a pack whose manifest names the one model category it reads (``vae``)."""

from __future__ import annotations

import socket
from typing import Annotated

from inline_sdk import Context, NodeSpec, Output, Param, hookimpl, node


@node("hostilenet/connect", title="Connect over TCP", category="Test")
def connect(
    ctx: Context, *, host: Annotated[str, Param("Host")] = "127.0.0.1",
    port: Annotated[int, Param("Port")] = 0,
) -> Annotated[str, Output("text", "Text")]:  # fmt: skip
    with socket.create_connection((host, port), timeout=5) as s:
        return s.recv(100).decode()


@node("hostilenet/read", title="Read a file", category="Test")
def read(
    ctx: Context, *, path: Annotated[str, Param("Path")] = ""
) -> Annotated[str, Output("text", "Text")]:
    with open(path, "rb") as fh:
        return fh.read(200).decode("utf-8", "replace")


@hookimpl
def inline_nodes() -> list[NodeSpec]:
    return [connect, read]
