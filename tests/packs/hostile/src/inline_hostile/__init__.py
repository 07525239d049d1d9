"""Nodes that try what a sandboxed worker must not do: read the user's and the host's files,
write outside the scratch, reach the network, look at or trace other processes. Each attempt
either succeeds (its node returns what it got) or fails with the OS's error (a node error)."""

from __future__ import annotations

import ctypes
import os
import socket
from typing import Annotated

from inline_sdk import AssetRef, Context, NodeSpec, Output, Param, hookimpl, node


@node("hostile/read", title="Read a file", category="Test")
def read(
    ctx: Context, *, path: Annotated[str, Param("Path")] = ""
) -> Annotated[str, Output("text", "Text")]:
    with open(path, "rb") as fh:
        return fh.read(200).decode("utf-8", "replace")


@node("hostile/asset", title="Read an uploaded asset", category="Test")
def asset(
    ctx: Context, *, asset: Annotated[AssetRef | None, Param("Asset", internal=True)] = None
) -> Annotated[str, Output("text", "Text")]:
    assert asset is not None
    path = ctx.resolve_input(asset)
    return f"{path}\n{ctx.read_input(asset).decode('utf-8', 'replace')}"


@node("hostile/list", title="List a folder", category="Test")
def listing(
    ctx: Context, *, path: Annotated[str, Param("Path")] = ""
) -> Annotated[str, Output("text", "Text")]:
    return ",".join(sorted(os.listdir(path)))


@node("hostile/write", title="Write a file", category="Test")
def write(
    ctx: Context, *, path: Annotated[str, Param("Path")] = ""
) -> Annotated[str, Output("text", "Text")]:
    with open(path, "w") as fh:
        fh.write("pwned")
    return f"wrote {path}"


@node("hostile/connect", title="Connect over TCP", category="Test")
def connect(
    ctx: Context, *, host: Annotated[str, Param("Host")] = "127.0.0.1",
    port: Annotated[int, Param("Port")] = 0,
) -> Annotated[str, Output("text", "Text")]:  # fmt: skip
    with socket.create_connection((host, port), timeout=5) as s:
        return s.recv(100).decode()


@node("hostile/environ", title="Another process's environment", category="Test")
def environ(
    ctx: Context, *, pid: Annotated[int, Param("Pid")] = 1
) -> Annotated[str, Output("text", "Text")]:
    with open(f"/proc/{pid}/environ", "rb") as fh:
        return fh.read().replace(b"\0", b"\n").decode("utf-8", "replace")


@node("hostile/ptrace", title="Trace another process", category="Test")
def ptrace(
    ctx: Context, *, pid: Annotated[int, Param("Pid")] = 1
) -> Annotated[str, Output("text", "Text")]:
    libc = ctypes.CDLL(None, use_errno=True)
    attach, detach = 16, 17  # PTRACE_ATTACH, PTRACE_DETACH
    if libc.ptrace(attach, pid, None, None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"ptrace({pid}): {os.strerror(err)}")
    libc.ptrace(detach, pid, None, None)
    return f"traced {pid}"


@node("hostile/whoami", title="Where am I", category="Test")
def whoami(ctx: Context) -> Annotated[str, Output("text", "Text")]:
    seen = {k: v for k, v in os.environ.items() if k.startswith(("INLINE_", "HOME"))}
    return repr(sorted(seen.items()))


@node("anthropic/steal", title="Take the Anthropic key", category="Test")
def steal(
    ctx: Context, *, api_key_secret: Annotated[str, Param("Key secret")] = "ANTHROPIC_API_KEY"
) -> Annotated[str, Output("text", "Text")]:
    """A node in another namespace than its pack's, naming the hosted pack's key."""
    return f"got {len(ctx.secret(api_key_secret))} characters"


@hookimpl
def inline_nodes() -> list[NodeSpec]:
    return [read, asset, listing, write, connect, environ, ptrace, whoami, steal]
