"""OpenAI's Responses API wire shapes: the request as this server reads it, the response
object, its output items and the streamed events' payloads.

The request is read in two steps: its keys are checked against what OpenAI defines (``SERVED``
are read, ``REFUSED`` get a 400 naming them: this server keeps no state and runs no built-in
tools; anything else is a 400 as an unknown parameter), then the body is decoded into
``ResponsesRequest``.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

__all__ = (
    "REFUSED",
    "SERVED",
    "FunctionCallItem",
    "IncompleteDetails",
    "InputTokensDetails",
    "MessageItem",
    "OutputItem",
    "OutputText",
    "OutputTokensDetails",
    "ReasoningItem",
    "ReasoningText",
    "ResponseError",
    "ResponseObject",
    "ResponseUsage",
    "ResponsesRequest",
)

#: Request fields this server reads.
SERVED: Final = frozenset(
    {"model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "stream",
     "max_output_tokens", "temperature", "top_p", "store", "metadata", "user", "text",
     "truncation", "service_tier", "stream_options", "safety_identifier", "prompt_cache_key",
     "background", "include", "reasoning", "previous_response_id", "conversation"}
)  # fmt: skip
#: Request fields OpenAI defines that this server does not serve, and why (a 400 says so).
REFUSED: Final = {
    "prompt": "stored prompts are not kept here",
    "max_tool_calls": "not supported by this server",
    "top_logprobs": "not supported by this server",
    "prompt_cache_retention": "not supported by this server",
    "context_management": "not supported by this server",
}


class ResponsesRequest(msgspec.Struct, frozen=True, kw_only=True):
    """``POST /openai/v1/responses`` (its keys checked beforehand: ``SERVED``)."""

    model: str
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    stream: bool = False
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    store: bool | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    text: dict[str, Any] | None = None
    truncation: str | None = None
    service_tier: str | None = None
    stream_options: dict[str, Any] | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    background: bool | None = None
    include: list[str] | None = None
    reasoning: dict[str, Any] | None = None
    previous_response_id: str | None = None
    conversation: str | dict[str, Any] | None = None


class OutputText(msgspec.Struct, frozen=True, tag="output_text", tag_field="type"):
    text: str
    annotations: list[Any] = msgspec.field(default_factory=list)
    logprobs: list[Any] = msgspec.field(default_factory=list)


class MessageItem(msgspec.Struct, frozen=True, tag="message", tag_field="type"):
    id: str
    status: str
    content: list[OutputText]
    role: str = "assistant"


class ReasoningText(msgspec.Struct, frozen=True, tag="reasoning_text", tag_field="type"):
    text: str


class ReasoningItem(msgspec.Struct, frozen=True, tag="reasoning", tag_field="type"):
    id: str
    status: str
    content: list[ReasoningText]
    summary: list[Any] = msgspec.field(default_factory=list)


class FunctionCallItem(msgspec.Struct, frozen=True, tag="function_call", tag_field="type"):
    id: str
    call_id: str
    name: str
    arguments: str
    status: str


OutputItem = MessageItem | ReasoningItem | FunctionCallItem


class InputTokensDetails(msgspec.Struct, frozen=True):
    cached_tokens: int = 0
    cache_write_tokens: int = 0


class OutputTokensDetails(msgspec.Struct, frozen=True):
    reasoning_tokens: int = 0


class ResponseUsage(msgspec.Struct, frozen=True):
    input_tokens: int
    output_tokens: int
    total_tokens: int
    input_tokens_details: InputTokensDetails = msgspec.field(default_factory=InputTokensDetails)
    output_tokens_details: OutputTokensDetails = msgspec.field(default_factory=OutputTokensDetails)


class IncompleteDetails(msgspec.Struct, frozen=True):
    reason: str


class ResponseError(msgspec.Struct, frozen=True):
    code: str
    message: str


class ResponseObject(msgspec.Struct, frozen=True, kw_only=True):
    """A response, as answered and as each lifecycle event carries it."""

    id: str
    created_at: int
    model: str
    status: str
    output: list[OutputItem]
    tools: list[dict[str, Any]]
    tool_choice: str | dict[str, Any]
    parallel_tool_calls: bool
    instructions: str | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    usage: ResponseUsage | None = None
    error: ResponseError | None = None
    incomplete_details: IncompleteDetails | None = None
    metadata: dict[str, str] = msgspec.field(default_factory=dict)
    user: str | None = None
    completed_at: int | None = None
    object: str = "response"
    store: bool = False
    background: bool = False
    previous_response_id: None = None
    truncation: str = "disabled"
    text: dict[str, Any] = msgspec.field(default_factory=lambda: {"format": {"type": "text"}})
