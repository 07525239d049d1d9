"""Runs: the engine over the kernel, durable submission (behind the store's gate), live state,
typed /v1 events and takes."""

from ._blobs import BlobStore
from ._deployment_views import DeploymentError, DeploymentExists, DeploymentView
from ._deployments import DeploymentService
from ._engine import Engine, PackExecutor, RunResult
from ._events import (
    DeltaEvent,
    Event,
    RunEvent,
    SnapshotEvent,
    Subscriber,
    encode_event,
    events_vocabulary,
)
from ._execution import take_view
from ._gate import StorageFailing
from ._service import Conflict, QueueFull, RunService
from ._store import RunStore
from ._takes import png_with_recipe
from ._views import RunState, RunSummary, Submitted, Take

__all__ = (
    "BlobStore",
    "Conflict",
    "DeploymentError",
    "DeploymentExists",
    "DeploymentService",
    "DeploymentView",
    "DeltaEvent",
    "Engine",
    "Event",
    "PackExecutor",
    "QueueFull",
    "RunEvent",
    "RunResult",
    "RunService",
    "RunState",
    "RunStore",
    "RunSummary",
    "SnapshotEvent",
    "StorageFailing",
    "Submitted",
    "Subscriber",
    "Take",
    "encode_event",
    "events_vocabulary",
    "png_with_recipe",
    "take_view",
)
