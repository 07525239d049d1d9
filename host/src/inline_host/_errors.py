"""Exceptions of the host.

InlineHostError            root
├── PackError              something went wrong with one pack's worker (carries ``pack``)
│   ├── PackCrashed        the worker died or the transport broke (exit code/signal, stderr tail)
│   ├── PackStartFailed    the worker refused the handshake or did not answer in time
│   └── CallTimedOut       a call outlived its deadline: cancelled, or its worker stopped
├── NodeError              node code raised; carries the remote type, message and traceback
├── CallCancelled          the call was cancelled before it finished
└── BlobError              a blob or asset could not be stored or found

HandlesGone                a call's input handles were made by an earlier worker of its pack;
                           an ``inline_core.StaleInput``: the run computes their producers again

A ``NodeError``'s remote type tells a user's mistake from a node's bug: ``USER_MISTAKES`` lists
the mistakes (``MODELS_MISSING`` and ``SECRETS_MISSING`` among them). ``inline run`` prints a
mistake without its traceback; ``/openai`` answers it 4xx instead of 5xx.
"""

from __future__ import annotations

import signal
from typing import Final

from inline_core import StaleInput
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
        # a model or LoRA file that cannot be used, named with what is wrong with it
        "ModelFileError",
        "NotSafetensors",
        "UnknownModel",
        "KeysMismatch",
        "LoraRefused",
        "WontFit",
        # an embedding folder whose sentence-transformers files cannot be run, and a request
        # for longer vectors than the model's
        "EncoderInvalid",
        "DimensionsRefused",
        *MODELS_MISSING,
        *SECRETS_MISSING,
    }
)


class InlineHostError(Exception):
    """Root of every exception the host raises."""


class SecretNotGranted(InlineHostError):
    """A call names a secret its pack was not granted: it is not sent, and the call fails."""

    def __init__(self, pack: str, name: str) -> None:
        self.pack = pack
        self.name = name
        super().__init__(
            f"pack {pack} was not granted the secret '{name}': it is not sent to it; grant it "
            f"with 'inline secrets grant {name} {pack}'"
        )


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
    """A node call ran past its deadline. It was cancelled; ``stopped`` when it ignored the
    cancel past the grace (``INLINE_CANCEL_GRACE``) and its worker was stopped with it."""

    def __init__(self, pack: str, node_type: str, timeout: float, stopped: bool = True) -> None:
        self.node_type = node_type
        self.timeout = timeout
        self.stopped = stopped
        what = (
            "ignored its cancel, so its worker was stopped"
            if stopped
            else "was cancelled; its worker goes on"
        )
        super().__init__(
            pack,
            f"Node '{node_type}' of pack '{pack}' did not finish within {timeout:g}s and "
            f"{what} (raise INLINE_CALL_TIMEOUT for longer work)",
        )


class HandlesGone(StaleInput):
    """A call's input handles were made by another worker of its pack (one that died or was
    replaced since): they were never sent. The kernel's ``StaleInput`` (``inputs`` are their
    (port, index) positions): the run computes their producers again on the current worker."""

    def __init__(self, pack: str, generation: int, inputs: list[tuple[str, int]]) -> None:
        self.pack = pack
        self.generation = generation
        ports = ", ".join(f"'{port}'" for port in dict.fromkeys(port for port, _ in inputs))
        super().__init__(
            inputs,
            f"the handles on input {ports} were made by an earlier worker of pack '{pack}', "
            f"which is gone (worker {generation} serves the pack now)",
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
