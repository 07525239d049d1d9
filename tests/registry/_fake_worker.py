"""A stand-in worker for handshake tests: reads the host's Hello from the inherited fd and
answers as ``INLINE_FAKE_ANSWER`` says (``refused``, ``sdk9``, ``welcome``, ``exit``)."""

from __future__ import annotations

import os
import socket
import sys

from inline_sdk import SDK_VERSION
from inline_sdk.protocol import (
    PROTOCOL,
    FrameCodec,
    Hello,
    Refused,
    RemoteError,
    ToWorker,
    Welcome,
    recv_frame,
)


def main() -> int:
    fd = int(sys.argv[sys.argv.index("--fd") + 1])
    pack = sys.argv[sys.argv.index("--pack") + 1]
    sock = socket.socket(fileno=fd)
    hello = recv_frame(sock, FrameCodec(ToWorker))
    assert isinstance(hello, Hello)
    answer = os.environ.get("INLINE_FAKE_ANSWER", "welcome")
    if answer == "exit":
        print("the fake worker gives up before answering", file=sys.stderr)
        return 3
    codec = FrameCodec(object)
    if answer == "refused":
        error = RemoteError("ImportError", "No module named 'acme_missing'", "Traceback: here")
        sock.sendall(codec.encode(Refused(error=error)))
    else:
        sdk = "9.0.0" if answer == "sdk9" else SDK_VERSION
        welcome = Welcome(
            protocol=PROTOCOL, sdk_version=sdk, pack=pack, pack_version="1.0.0",
            descriptors=[], pid=os.getpid(),
        )  # fmt: skip
        sock.sendall(codec.encode(welcome))
    sock.recv(1 << 16)  # the host's Shutdown, or its end closing
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
