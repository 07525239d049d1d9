"""A typed Python client for Inline's ``/v1`` API (httpx + msgspec only).

async with AsyncClient("http://127.0.0.1:8848") as inline:
    async for chunk in inline.complete("qwen3-4b", [{"role": "user", "content": "Hi"}]):
        print(chunk.content, end="")

with Client("http://127.0.0.1:8848", token) as inline:   # the operator token: imports, removals
    inline.import_model("hf:Qwen/Qwen3-4B")                # waits for the files; a Download
    inline.list_models(), inline.show_model("Qwen3-4B")   # LocalModel, with its card
    inline.deploy("Qwen3-4B", replicas=1, wait=True)      # a Deployment
"""

from ._async import AsyncClient, AsyncRun
from ._errors import ApiError, DownloadFailed, GraphInvalid, InlineError, RunFailed
from ._sync import Client, Run
from ._types import (
    Autoscaling,
    Cancelled,
    CompletionChunk,
    Decision,
    Delta,
    Deployment,
    Download,
    DownloadFile,
    Event,
    Failed,
    GeneratedImage,
    GeneratedMesh,
    LocalModel,
    NodeDone,
    NodeFailed,
    NodeFailure,
    Other,
    Preview,
    Progress,
    Replica,
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
    "Autoscaling",
    "Cancelled",
    "Client",
    "CompletionChunk",
    "Decision",
    "Delta",
    "Deployment",
    "Download",
    "DownloadFailed",
    "DownloadFile",
    "Event",
    "Failed",
    "GeneratedImage",
    "GeneratedMesh",
    "GraphInvalid",
    "InlineError",
    "LocalModel",
    "NodeDone",
    "NodeFailed",
    "NodeFailure",
    "Other",
    "Preview",
    "Progress",
    "Replica",
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
