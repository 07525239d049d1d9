"""Runs: the engine over the kernel, durable submission (behind the store's gate), live state,
events and takes."""

from ._blobs import BlobStore
from ._engine import Engine, PackExecutor, RunResult
from ._execution import take_view
from ._gate import StorageFailing
from ._service import Conflict, QueueFull, RunService
from ._store import RunStore
from ._takes import png_with_text
from ._views import RunState, RunSummary, Submitted, Take

__all__ = (
    "BlobStore",
    "Conflict",
    "Engine",
    "PackExecutor",
    "QueueFull",
    "RunResult",
    "RunService",
    "RunState",
    "RunStore",
    "RunSummary",
    "StorageFailing",
    "Submitted",
    "Take",
    "png_with_text",
    "take_view",
)
