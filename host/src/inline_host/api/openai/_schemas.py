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
    """``POST /openai/v1/chat/completions`` (the fields read; every other field of the body is
    refused by name before this is decoded: ``_chat.check_fields``)."""

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
    parallel_tool_calls: bool | None = None
    user: str | None = None
    response_format: dict[str, Any] | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    reasoning_effort: str | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None


class CompletionRequest(msgspec.Struct, frozen=True):
    """``POST /openai/v1/completions`` (the legacy text completion: a prompt in, text out)."""

    model: str
    prompt: str | list[str]
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    n: int | None = None
    stop: str | list[str] | None = None
    user: str | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None


class TextChoice(msgspec.Struct, frozen=True):
    index: int
    text: str
    finish_reason: str | None = None
    logprobs: None = None


class TextCompletion(msgspec.Struct, frozen=True):
    """A ``/completions`` answer, and (``choices`` with a piece each) one of its stream chunks."""

    id: str
    created: int
    model: str
    choices: list[TextChoice]
    usage: Usage | None = None
    object: str = "text_completion"
    system_fingerprint: None = None


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


class TopLogprob(msgspec.Struct, frozen=True):
    token: str
    logprob: float
    bytes: list[int] | None


class TokenLogprob(msgspec.Struct, frozen=True):
    token: str
    logprob: float
    bytes: list[int] | None
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(msgspec.Struct, frozen=True):
    """A choice's ``logprobs`` (``logprobs: true``): one entry per token of its content."""

    content: list[TokenLogprob] | None
    refusal: None = None


class Choice(msgspec.Struct, frozen=True):
    index: int
    message: Message
    finish_reason: str
    logprobs: ChoiceLogprobs | None = None


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
    logprobs: ChoiceLogprobs | None = None


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
