"""A typed Python client for Inline's ``/v1`` API (httpx + msgspec only).

async with AsyncClient("http://127.0.0.1:8848") as inline:
    async for chunk in inline.complete("qwen3-4b", [{"role": "user", "content": "Hi"}]):
        print(chunk.content, end="")
"""

from ._async import AsyncClient, AsyncRun
from ._errors import ApiError, GraphInvalid, InlineError, RunFailed
from ._sync import Client, Run
from ._types import (
    Cancelled,
    CompletionChunk,
    Delta,
    Event,
    Failed,
    GeneratedImage,
    GeneratedMesh,
    NodeDone,
    NodeFailed,
    NodeFailure,
    Other,
    Preview,
    Progress,
    RunDone,
    RunError,
    RunStarted,
    RunState,
    Snapshot,
    Take,
    ToolCall,
)

__all__ = (
    "ApiError",
    "AsyncClient",
    "AsyncRun",
    "Cancelled",
    "Client",
    "CompletionChunk",
    "Delta",
    "Event",
    "Failed",
    "GeneratedImage",
    "GeneratedMesh",
    "GraphInvalid",
    "InlineError",
    "NodeDone",
    "NodeFailed",
    "NodeFailure",
    "Other",
    "Preview",
    "Progress",
    "Run",
    "RunDone",
    "RunError",
    "RunFailed",
    "RunStarted",
    "RunState",
    "Snapshot",
    "Take",
    "ToolCall",
)
