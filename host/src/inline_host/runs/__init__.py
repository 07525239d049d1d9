"""Runs: the engine over the kernel, durable submission, live state, events and takes."""

from ._blobs import BlobStore
from ._engine import Engine, PackExecutor, RunResult
from ._service import Conflict, RunService
from ._store import RunStore

__all__ = ("BlobStore", "Conflict", "Engine", "PackExecutor", "RunResult", "RunService", "RunStore")
