"""What every hosted node shares: the text/complete shape, upstream errors, retries."""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable
from typing import Annotated, Any, Final, NamedTuple, TypeVar

from inline_sdk import Context, Output

T = TypeVar("T")

#: Statuses worth another try: rate limited, overloaded (Anthropic), unavailable.
RETRYABLE: Final = frozenset({429, 503, 529})
#: Seconds of the call timeout kept back for the last try's own answer.
MARGIN: Final = 5.0


class Completion(NamedTuple):
    """The outputs of a completion node (the same as ``text/complete``'s)."""

    text: Annotated[str, Output(label="Text")]
    thinking: Annotated[str, Output(label="Thinking")]
    tool_calls: Annotated[str, Output(label="Tool calls")]
    finish_reason: Annotated[str, Output(label="Finish reason")]


class UpstreamError(Exception):
    """The provider answered with an error: names the provider, the status and its message."""

    def __init__(self, provider: str, status: int | None, message: str) -> None:
        where = f"{status}" if status is not None else "no status"
        super().__init__(f"{provider} API error ({where}): {message}")
        self.provider = provider
        self.status = status
        self.upstream_message = message


class Streamed:
    """Collects a reply while streaming its text and thinking; records whether anything was
    streamed (a retry after that would repeat it)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.text: list[str] = []
        self.thinking: list[str] = []
        self.tool_calls: list[dict[str, str]] = []
        self.started = False

    def add_text(self, piece: str) -> None:
        if piece:
            self.started = True
            self.text.append(piece)
            self.ctx.stream("text", piece)

    def add_thinking(self, piece: str) -> None:
        if piece:
            self.started = True
            self.thinking.append(piece)
            self.ctx.stream("thinking", piece)

    def add_tool_call(self, call_id: str, name: str, arguments: Any) -> None:
        args = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
        self.tool_calls.append({"id": call_id, "name": name, "arguments": args})

    def result(self, finish_reason: str) -> Completion:
        reason = "tool_calls" if self.tool_calls else finish_reason
        return Completion(
            text="".join(self.text),
            thinking="".join(self.thinking),
            tool_calls=json.dumps(self.tool_calls),
            finish_reason=reason,
        )


def base_url(variable: str) -> str | None:
    """Where a provider's API is (``INLINE_ANTHROPIC_BASE_URL`` / ``INLINE_GEMINI_BASE_URL``),
    None for the provider's own."""
    return os.environ.get(variable) or None


def call_deadline() -> float:
    """When retries must stop: the host's call timeout (``INLINE_CALL_TIMEOUT``), less a margin."""
    try:
        timeout = float(os.environ.get("INLINE_CALL_TIMEOUT") or 3600)
    except ValueError:
        timeout = 3600.0
    return time.monotonic() + max(1.0, timeout - MARGIN)


def with_retries(
    ctx: Context,
    attempt: Callable[[], T],
    status_of: Callable[[BaseException], tuple[int | None, str, float | None] | None],
    provider: str,
    can_retry: Callable[[], bool] = lambda: True,
) -> T:
    """Run ``attempt``; on a retryable upstream status, wait (exponential backoff with jitter,
    or the server's ``Retry-After``) and try again, until the call's deadline. ``status_of``
    maps an SDK exception to (status, message, retry-after) or None (not an API error)."""
    deadline = call_deadline()
    delay = 0.5
    tries = 0
    while True:
        tries += 1
        try:
            return attempt()
        except Exception as exc:
            info = status_of(exc)
            if info is None:
                raise
            status, message, retry_after = info
            wait = retry_after if retry_after is not None else delay * (1 + random.random() / 2)
            if status not in RETRYABLE or not can_retry() or time.monotonic() + wait > deadline:
                raise UpstreamError(provider, status, message) from None
            ctx.log.warning(
                "%s API answered %s (try %d); retrying in %.1f s", provider, status, tries, wait
            )
            if ctx.wait_cancelled(wait):
                ctx.check_cancelled()
            delay = min(delay * 2, 30.0)


def retry_after_of(headers: Any) -> float | None:
    """The ``Retry-After`` header's seconds, if any."""
    try:
        raw = headers.get("retry-after") if headers is not None else None
        return min(60.0, float(raw)) if raw else None
    except (TypeError, ValueError):
        return None


def user_messages(messages: list[dict[str, Any]], prompt: str | None) -> list[dict[str, Any]]:
    """The conversation: ``messages``, then the ``prompt`` input as the last user message."""
    out = [dict(m) for m in messages]
    if prompt:
        out.append({"role": "user", "content": prompt})
    if not out:
        raise ValueError("nothing to complete: give a prompt or messages")
    return out


def text_of(content: Any) -> str:
    """A message's content as text (OpenAI content parts joined)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def function_specs(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI-style tool specs as ``{name, description, parameters}``."""
    out = []
    for i, tool in enumerate(tools):
        fn = tool.get("function", tool) if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise ValueError(f"tools[{i}] is not a function spec ({{type, function: {{name}}}})")
        out.append(
            {
                "name": fn["name"],
                "description": str(fn.get("description") or ""),
                "parameters": fn.get("parameters") or {"type": "object", "properties": {}},
            }
        )
    return out


def parse_arguments(raw: Any) -> dict[str, Any]:
    """A tool call's arguments (a JSON string or an object) as an object."""
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw or "{}")
    except (TypeError, json.JSONDecodeError):
        return {}
    return value if isinstance(value, dict) else {}
