"""Exceptions of the pack registry.

RegistryError              root
├── PackInvalid            a pack's project is malformed (no pyproject, no entry point...)
├── EnvBuildFailed         uv could not create or fill the pack's venv (uv's output attached)
├── HandshakeFailed        the pack's worker refused, crashed or timed out at handshake
├── SdkMismatch            the pack speaks an SDK major this host does not
├── NodeConflict           two packs declare the same node type
├── NodeIdRefused          a pack's node id is not its own (ownership of the vocabulary)
├── SourceUnavailable      a pack source cannot be fetched (folder, wheel, index, git ref)
├── RequirementsRefused    requirement lines or platform pins a pack may not use
├── ScanRefused            the static scan found what blocks the install, or needs consent
├── PackNotInstalled       no such installed pack (or no version to roll back to)
└── LockInvalid            packs.lock cannot be read, or does not match what is on disk
"""

from __future__ import annotations

from typing import Any


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

    def __init__(self, pack: str, pack_sdk: str, host_sdk: str, note: str = "") -> None:
        self.pack = pack
        self.pack_sdk = pack_sdk
        self.host_sdk = host_sdk
        major = host_sdk.split(".")[0]
        note = note or f"major {major}.x only: every {major}.x pack runs here, no other major"
        super().__init__(
            f"Pack '{pack}' was built for inline-sdk {pack_sdk}, but this host speaks "
            f"inline-sdk {host_sdk} ({note})"
        )


class NodeConflict(RegistryError):
    """Two packs claim the same node type id."""

    def __init__(self, node_type: str, first: str, second: str) -> None:
        self.node_type = node_type
        self.packs = (first, second)
        super().__init__(
            f"Node type '{node_type}' is declared by both pack '{first}' and pack '{second}'"
        )


class NodeIdRefused(RegistryError):
    """A pack declares node ids it does not own."""

    def __init__(self, pack: str, problems: list[str]) -> None:
        self.pack = pack
        self.problems = problems
        super().__init__(
            f"Pack '{pack}' declares node ids it may not use:\n  - " + "\n  - ".join(problems)
        )


class SourceUnavailable(RegistryError):
    """A pack source cannot be fetched or read."""

    def __init__(self, source: str, reason: str) -> None:
        self.source = source
        self.reason = reason
        super().__init__(f"Cannot fetch pack source '{source}': {reason}")


class RequirementsRefused(RegistryError):
    """A pack's requirements use what this host refuses (local sources, other platform pins)."""

    def __init__(self, pack: str, problems: list[str], hint: str = "") -> None:
        self.pack = pack
        self.problems = problems
        extra = f"\n{hint}" if hint else ""
        super().__init__(
            f"Pack '{pack}' has requirements this host refuses:\n  - "
            + "\n  - ".join(problems)
            + extra
        )


class ScanRefused(RegistryError):
    """The static scan blocks the install (critical findings) or needs the operator's consent."""

    def __init__(self, pack: str, report: Any, blocked: list[str], consent: list[str]) -> None:
        self.pack = pack
        self.report = report
        self.blocked = blocked
        self.consent = consent
        if blocked:
            head = f"critical findings block the install ({', '.join(blocked)})"
        else:
            allow = " ".join(f"--allow {rule}" for rule in consent)
            head = f"the install needs your consent: re-run with {allow}"
        super().__init__(f"Pack '{pack}' was not installed: {head}\n{report.render()}")


class PackNotInstalled(RegistryError):
    """The named pack is not installed, or has no version for the operation."""

    def __init__(self, pack: str, reason: str = "is not installed") -> None:
        self.pack = pack
        self.reason = reason
        super().__init__(f"Pack '{pack}' {reason}")


class LockInvalid(RegistryError):
    """``packs.lock`` cannot be read or does not match the data dir."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"The pack lock '{path}' is unusable: {reason}")
