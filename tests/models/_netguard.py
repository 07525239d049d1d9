"""Installed into a pack venv by the tests: when ``INLINE_NETGUARD_LOG`` names a file, every
attempt to resolve a host name or open an IP connection is written there and refused."""

import os
import socket
import sys

_LOG = os.environ.get("INLINE_NETGUARD_LOG")


def _hook(event: str, args: tuple) -> None:
    if event == "socket.getaddrinfo":
        what = f"getaddrinfo {args[0]!r}:{args[1]!r}"
    elif event == "socket.connect" and args[0].family in (socket.AF_INET, socket.AF_INET6):
        what = f"connect {args[1]!r}"
    else:
        return
    with open(_LOG, "a") as fh:  # type: ignore[arg-type]
        fh.write(f"{os.getpid()} {what}\n")
    raise OSError(f"network access refused by the test guard: {what}")


if _LOG:
    sys.addaudithook(_hook)
