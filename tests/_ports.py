"""Ports for the servers tests start, out of the kernel's ephemeral range.

A port found by binding port 0 comes from the ephemeral range, the one every outgoing
connection and every ``bind(0)`` of another process (Ray's many) takes its ports from: between
finding it free and the server binding it (a host joins its cluster first, for seconds),
another process can take it. Ports below the ephemeral range are handed out by nobody.
"""

from __future__ import annotations

import random
import socket

#: Below Linux's default ephemeral range (32768-60999), above Ray's worker ports (10002-19999).
LOW, HIGH = 20000, 32767


def free_port() -> int:
    """A loopback TCP port no one listens on now, outside the ephemeral range."""
    for _ in range(1000):
        port = random.randint(LOW, HIGH)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {LOW}-{HIGH} on 127.0.0.1")
