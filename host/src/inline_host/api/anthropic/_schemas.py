"""Anthropic's Messages wire shapes (requests, the message answered, the error every
``/anthropic/`` route answers in).

Requests are read strictly: a field Anthropic's API does not know, or one this server does not
serve (``container``, ``mcp_servers``...), is a 400 naming it, never ignored. Blocks this server
cannot give a local model (``image``, ``document``) are read, then refused by name
(``_messages``).
"""

from __future__ import annotations

import re
from typing import Any, Final, Literal

import msgspec
from litestar import MediaType, Request, Response

#: Error types by status, as Anthropic's API answers them.
ERROR_TYPES: Final = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
#: Request fields of Anthropic's API this server does not serve (a 400 says so, by name).
UNSERVED: Final = frozenset(
    {"container", "context_management", "diagnostics", "inference_geo", "mcp_servers",
     "output_config", "output_format", "speed"}
)  # fmt: skip


class Strict(msgspec.Struct, forbid_unknown_fields=True):
    """A request object: unknown fields are refused."""


class TextBlock(Strict, tag="text", tag_field="type"):
    text: str
    cache_control: dict[str, Any] | None = None  # a caching hint: nothing to cache here
    citations: list[dict[str, Any]] | None = None  # of an earlier reply: kept out of the prompt


class ImageBlock(msgspec.Struct, frozen=True, tag="image", tag_field="type"):
    """An image (refused by name: no chat model here reads images)."""


class DocumentBlock(msgspec.Struct, frozen=True, tag="document", tag_field="type"):
    """A document (refused by name)."""


class ToolUseBlock(Strict, tag="tool_use", tag_field="type"):
    id: str
    name: str
    input: dict[str, Any]
    cache_control: dict[str, Any] | None = None


class ToolResultBlock(Strict, tag="tool_result", tag_field="type"):
    tool_use_id: str
    content: str | list[TextBlock | ImageBlock | DocumentBlock] = ""
    is_error: bool = False
    cache_control: dict[str, Any] | None = None


class ThinkingBlock(Strict, tag="thinking", tag_field="type"):
    thinking: str
    signature: str = ""


class RedactedThinkingBlock(Strict, tag="redacted_thinking", tag_field="type"):
    data: str


Block = (
    TextBlock
    | ImageBlock
    | DocumentBlock
    | ToolUseBlock
    | ToolResultBlock
    | ThinkingBlock
    | RedactedThinkingBlock
)


class MessageParam(Strict):
    role: Literal["user", "assistant"]
    content: str | list[Block]


class ToolChoiceAuto(Strict, tag="auto", tag_field="type"):
    disable_parallel_tool_use: bool | None = None


class ToolChoiceAny(Strict, tag="any", tag_field="type"):
    disable_parallel_tool_use: bool | None = None


class ToolChoiceTool(Strict, tag="tool", tag_field="type"):
    name: str
    disable_parallel_tool_use: bool | None = None


class ToolChoiceNone(Strict, tag="none", tag_field="type"):
    pass


ToolChoice = ToolChoiceAuto | ToolChoiceAny | ToolChoiceTool | ToolChoiceNone


class ThinkingEnabled(Strict, tag="enabled", tag_field="type"):
    budget_tokens: int
    display: Literal["summarized", "omitted"] | None = None


class ThinkingAdaptive(Strict, tag="adaptive", tag_field="type"):
    display: Literal["summarized", "omitted"] | None = None


class ThinkingDisabled(Strict, tag="disabled", tag_field="type"):
    pass


Thinking = ThinkingEnabled | ThinkingAdaptive | ThinkingDisabled


class CustomTool(Strict):
    """A client tool (Anthropic's server tools have a ``type`` of their own: refused)."""

    name: str
    input_schema: dict[str, Any]
    description: str | None = None
    type: Literal["custom"] | None = None
    cache_control: dict[str, Any] | None = None
    strict: bool | None = None


class Metadata(Strict):
    user_id: str | None = None


class CountTokensRequest(Strict):
    """``POST /anthropic/v1/messages/count_tokens``."""

    model: str
    messages: list[MessageParam]
    system: str | list[TextBlock] | None = None
    tools: list[dict[str, Any]] | None = None  # each read as a ``CustomTool`` (``_messages``)
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    cache_control: dict[str, Any] | None = None


class MessagesRequest(Strict):
    """``POST /anthropic/v1/messages``."""

    model: str
    max_tokens: int
    messages: list[MessageParam]
    system: str | list[TextBlock] | None = None
    stop_sequences: list[str] | None = None
    stream: bool = False
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    metadata: Metadata | None = None
    service_tier: Literal["auto", "standard_only"] | None = None  # one tier here
    cache_control: dict[str, Any] | None = None


class TextOut(msgspec.Struct, frozen=True, tag="text", tag_field="type"):
    text: str


class ThinkingOut(msgspec.Struct, frozen=True, tag="thinking", tag_field="type"):
    thinking: str
    signature: str


class ToolUseOut(msgspec.Struct, frozen=True, tag="tool_use", tag_field="type"):
    id: str
    name: str
    input: dict[str, Any]


ContentOut = ThinkingOut | TextOut | ToolUseOut


class UsageOut(msgspec.Struct, frozen=True):
    input_tokens: int
    output_tokens: int


class MessageOut(msgspec.Struct, frozen=True, tag="message", tag_field="type"):
    """The message answered (and, with empty content and no stop reason, ``message_start``'s)."""

    id: str
    role: str
    model: str
    content: list[ContentOut]
    stop_reason: str | None
    stop_sequence: str | None
    usage: UsageOut


class TokenCount(msgspec.Struct, frozen=True):
    input_tokens: int


class AnthropicError(Exception):
    """An error answered in Anthropic's shape ``{"type": "error", "error": {type, message}}``
    (``type`` by status unless given; with ``headers``, such as ``x-should-retry``)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = (
            type
            or ERROR_TYPES.get(status)
            or ("api_error" if status >= 500 else "invalid_request_error")
        )
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        return {"type": "error", "error": {"type": self.type, "message": self.message}}


def anthropic_error(_request: Request[Any, Any, Any], exc: AnthropicError) -> Response[Any]:
    """An ``AnthropicError`` as its response (the routes' exception handler)."""
    return Response(
        exc.body(), status_code=exc.status, media_type=MediaType.JSON, headers=exc.headers
    )


_FIELD = re.compile(r"Object (missing required|contains unknown) field `(.+)`")
_TAG = re.compile(r"Invalid value '(.*)'")


def dotted(path: str) -> str:
    """A msgspec path (``$.messages[0].content``) as Anthropic writes it
    (``messages.0.content``)."""
    return re.sub(r"\[(\d+)\]", r".\1", path.removeprefix("$")).lstrip(".")


def invalid(exc: msgspec.ValidationError | msgspec.DecodeError, prefix: str = "") -> AnthropicError:
    """A body msgspec refused, as Anthropic's 400 naming the field (``prefix``: where the
    object checked sits in the request, for one read on its own)."""
    if isinstance(exc, msgspec.DecodeError) and not isinstance(exc, msgspec.ValidationError):
        return AnthropicError(400, f"The request body is not valid JSON: {exc}")
    message, sep, at = str(exc).rpartition(" - at `")
    if not sep:
        message, at = str(exc), "$"
    path = ".".join(p for p in (prefix, dotted(at.rstrip("`"))) if p)
    found = _FIELD.fullmatch(message)
    if found is not None:
        field = ".".join(p for p in (path, found[2]) if p)
        if found[1] == "missing required":
            return AnthropicError(400, f"{field}: Field required")
        if field in UNSERVED:
            return AnthropicError(400, f"{field}: not supported by this server")
        return AnthropicError(400, f"{field}: Extra inputs are not permitted")
    tag = _TAG.fullmatch(message)
    if tag is not None and path.endswith("type"):
        return AnthropicError(400, f"{path}: {tag[1]!r} is not a type this server takes here")
    return AnthropicError(400, f"{path}: {message}" if path else message)
