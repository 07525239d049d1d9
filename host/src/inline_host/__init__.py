"""The Inline host: pack supervisor, blob store, engine and the ``inline`` command."""

from ._blobs import BlobStore
from ._engine import Engine, PackExecutor, RunResult
from ._errors import (
    BlobError,
    CallCancelled,
    CallTimedOut,
    InlineHostError,
    NodeError,
    PackCrashed,
    PackError,
    PackStartFailed,
)
from ._packs import PackService
from ._settings import Settings
from ._supervisor import HostValue, Supervisor, WorkerProcess

__all__ = (
    "BlobError",
    "BlobStore",
    "CallCancelled",
    "CallTimedOut",
    "Engine",
    "HostValue",
    "InlineHostError",
    "NodeError",
    "PackCrashed",
    "PackError",
    "PackExecutor",
    "PackService",
    "PackStartFailed",
    "RunResult",
    "Settings",
    "Supervisor",
    "WorkerProcess",
)
