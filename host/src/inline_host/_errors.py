"""Exceptions of the host.

InlineHostError            root
├── PackError              something went wrong with one pack's worker (carries ``pack``)
│   ├── PackCrashed        the worker died or the transport broke (exit code/signal, stderr tail)
│   ├── PackStartFailed    the worker refused the handshake or did not answer in time
│   └── CallTimedOut       a call outlived its deadline; the worker was stopped
├── NodeError              node code raised; carries the remote type, message and traceback
├── CallCancelled          the call was cancelled before it finished
└── BlobError              a blob or asset could not be stored or found

A ``NodeError``'s remote type tells a user's mistake from a node's bug: ``USER_MISTAKES`` lists
the mistakes (``MODELS_MISSING`` and ``SECRETS_MISSING`` among them). ``inline run`` prints a
mistake without its traceback; ``/openai`` answers it 4xx instead of 5xx.
"""

from __future__ import annotations

import signal
from typing import Final

from inline_sdk.protocol import RemoteError

#: Remote exception types that report missing (or unusable) model files.
MODELS_MISSING: Final = frozenset(
    {"ModelsMissing", "TokenizerMissing", "ModelNotFound", "PipelineFolderError"}
)
#: Remote exception types that report a secret (an API key) the host does not hold.
SECRETS_MISSING: Final = frozenset({"SecretMissing"})
#: Remote exception types that report a user's mistake, not a node's bug.
USER_MISTAKES: Final = frozenset(
    {
        "InputRefused",
        "FileNotFoundError",
        "IsADirectoryError",
        "NotADirectoryError",
        "PermissionError",
        "ParamsInvalid",
        "UnidentifiedImageError",
        "HeaderError",
        *MODELS_MISSING,
        *SECRETS_MISSING,
    }
)


class InlineHostError(Exception):
    """Root of every exception the host raises."""


class PackError(InlineHostError):
    """A failure of one pack's worker process."""

    def __init__(self, pack: str, message: str) -> None:
        self.pack = pack
        super().__init__(message)


def describe_exit(returncode: int | None) -> str:
    """'exited with code 3' / 'was killed by signal 9 (SIGKILL)'."""
    if returncode is None:
        return "stopped answering"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "unknown"
        return f"was killed by signal {-returncode} ({name})"
    return f"exited with code {returncode}"


class PackCrashed(PackError):
    """The worker process died, or its connection broke."""

    def __init__(
        self, pack: str, returncode: int | None, stderr_tail: str, during: str = ""
    ) -> None:
        self.returncode = returncode
        self.stderr_tail = stderr_tail
        self.signal = -returncode if returncode is not None and returncode < 0 else None
        what = f" while running {during}" if during else ""
        tail = f"\nLast stderr lines:\n{stderr_tail}" if stderr_tail.strip() else ""
        super().__init__(pack, f"Pack '{pack}' worker {describe_exit(returncode)}{what}.{tail}")


class PackStartFailed(PackError):
    """The worker did not complete its handshake."""

    def __init__(self, pack: str, reason: str, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail
        extra = f"\n{detail.rstrip()}" if detail.strip() else ""
        super().__init__(pack, f"Pack '{pack}' worker could not start: {reason}{extra}")


class CallTimedOut(PackError):
    """A node call ran past its deadline."""

    def __init__(self, pack: str, node_type: str, timeout: float) -> None:
        self.node_type = node_type
        self.timeout = timeout
        super().__init__(
            pack,
            f"Node '{node_type}' of pack '{pack}' did not finish within {timeout:g}s; "
            "its worker was stopped (raise INLINE_CALL_TIMEOUT for longer work)",
        )


class NodeError(InlineHostError):
    """Node code raised; the remote exception arrives as data."""

    def __init__(self, pack: str, node_type: str, node_id: str, error: RemoteError) -> None:
        self.pack = pack
        self.node_type = node_type
        self.node_id = node_id
        self.remote_type = error.type
        self.remote_message = error.message
        self.traceback = error.traceback
        super().__init__(error.message)


class CallCancelled(InlineHostError):
    """The call was cancelled."""


class BlobError(InlineHostError):
    """A blob could not be stored or read."""
