"""OpenAI's chat-completion wire shapes (requests, responses, stream chunks) and the error
every ``/openai/`` route answers in."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import MediaType, Request, Response


class FunctionSpec(msgspec.Struct, frozen=True):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(msgspec.Struct, frozen=True):
    function: FunctionSpec
    type: str = "function"


class StreamOptions(msgspec.Struct, frozen=True):
    include_usage: bool = False


class ChatRequest(msgspec.Struct, frozen=True):
    """``POST /openai/v1/chat/completions`` (unknown fields ignored, as OpenAI's servers do)."""

    model: str
    messages: list[dict[str, Any]]
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    n: int | None = None
    stop: str | list[str] | None = None
    tools: list[Tool] | None = None
    tool_choice: Any = None
    user: str | None = None


class FunctionCall(msgspec.Struct, frozen=True, omit_defaults=True):
    name: str | None = None
    arguments: str | None = None


class ToolCall(msgspec.Struct, frozen=True):
    id: str
    function: FunctionCall
    type: str = "function"


class Message(msgspec.Struct, frozen=True):
    role: str
    content: str | None
    tool_calls: list[ToolCall] | msgspec.UnsetType = msgspec.UNSET
    reasoning_content: str | msgspec.UnsetType = msgspec.UNSET


class Choice(msgspec.Struct, frozen=True):
    index: int
    message: Message
    finish_reason: str
    logprobs: None = None


class Usage(msgspec.Struct, frozen=True):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatCompletion(msgspec.Struct, frozen=True):
    id: str
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    object: str = "chat.completion"
    system_fingerprint: None = None


class ToolCallDelta(msgspec.Struct, frozen=True, omit_defaults=True):
    index: int
    id: str | None = None
    type: str | None = None
    function: FunctionCall | None = None


class Delta(msgspec.Struct, frozen=True, omit_defaults=True):
    role: str | None = None
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class ChunkChoice(msgspec.Struct, frozen=True):
    index: int
    delta: Delta
    finish_reason: str | None = None
    logprobs: None = None


class ChatChunk(msgspec.Struct, frozen=True):
    id: str
    created: int
    model: str
    choices: list[ChunkChoice]
    object: str = "chat.completion.chunk"
    system_fingerprint: None = None
    usage: Usage | None = None


class ModelCard(msgspec.Struct, frozen=True):
    id: str
    created: int
    owned_by: str = "inline"
    object: str = "model"


class ModelList(msgspec.Struct, frozen=True):
    data: list[ModelCard]
    object: str = "list"


class OpenAIError(Exception):
    """An error answered in OpenAI's shape ``{"error": {message, type, code, param}}`` (with
    ``headers``, such as ``x-should-retry``)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.code = code
        self.param = param
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "code": self.code,
                "param": self.param,
            }
        }


def openai_error(_request: Request[Any, Any, Any], exc: OpenAIError) -> Response[Any]:
    """An ``OpenAIError`` as its response (the routes' exception handler)."""
    return Response(
        exc.body(), status_code=exc.status, media_type=MediaType.JSON, headers=exc.headers
    )
