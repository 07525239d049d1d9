"""Exceptions of the pack registry.

RegistryError              root
├── PackInvalid            a pack's project is malformed (no pyproject, no entry point...)
├── EnvBuildFailed         uv could not create or fill the pack's venv (uv's output attached)
├── HandshakeFailed        the pack's worker refused, crashed or timed out at handshake
├── SdkMismatch            the pack speaks an SDK major this host does not
└── NodeConflict           two packs declare the same node type
"""

from __future__ import annotations


class RegistryError(Exception):
    """Root of every exception the registry raises."""


class PackInvalid(RegistryError):
    """A pack's project cannot be used as a pack."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"Pack at '{path}' is invalid: {reason}")


class EnvBuildFailed(RegistryError):
    """uv failed while building a pack's venv."""

    def __init__(self, pack: str, step: str, output: str) -> None:
        self.pack = pack
        self.step = step
        self.output = output
        tail = "\n".join(output.strip().splitlines()[-25:])
        super().__init__(f"Could not build the venv of pack '{pack}' ({step}):\n{tail}")


class HandshakeFailed(RegistryError):
    """The pack's worker did not complete the handshake."""

    def __init__(self, pack: str, reason: str, traceback: str = "") -> None:
        self.pack = pack
        self.reason = reason
        self.traceback = traceback
        extra = f"\n{traceback.rstrip()}" if traceback else ""
        super().__init__(f"Pack '{pack}' failed its handshake: {reason}{extra}")


class SdkMismatch(RegistryError):
    """The pack was built for an SDK major this host does not speak."""

    def __init__(self, pack: str, pack_sdk: str, host_sdk: str) -> None:
        self.pack = pack
        self.pack_sdk = pack_sdk
        self.host_sdk = host_sdk
        super().__init__(
            f"Pack '{pack}' was built for inline-sdk {pack_sdk}, but this host speaks "
            f"inline-sdk {host_sdk} (major {host_sdk.split('.')[0]}.x only)"
        )


class NodeConflict(RegistryError):
    """Two packs claim the same node type id."""

    def __init__(self, node_type: str, first: str, second: str) -> None:
        self.node_type = node_type
        self.packs = (first, second)
        super().__init__(
            f"Node type '{node_type}' is declared by both pack '{first}' and pack '{second}'"
        )
