"""The Inline host: pack workers, durable runs, the /v1 API and the ``inline`` command.

Arranged by role: ``runs`` (the engine, the run service, the store, takes), ``workers`` (pack
processes, launchers, the memory broker), ``models`` (catalogs, fit), ``packs`` (pack management),
``api`` (Litestar controllers, which talk only to services) and ``cli``.
"""

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
from ._settings import Settings
from .packs._service import PackService
from .runs._blobs import BlobStore
from .runs._engine import Engine, PackExecutor, RunResult
from .workers._supervisor import HostValue, Supervisor, WorkerProcess

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
