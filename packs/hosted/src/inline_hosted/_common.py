"""What every hosted node shares: the streamed reply, upstream errors, retries (the chat
shape itself is the SDK's ``ChatCompletion``)."""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections.abc import Callable
from typing import Annotated, Any, Final, TypeVar

from inline_sdk import Context, Param, ParamIssue, ParamsInvalid
from inline_sdk.chat import Completion, ToolCall, Usage

T = TypeVar("T")

# The chat params both completion nodes declare alike (their model and limits differ).
Messages = Annotated[list[dict[str, Any]], Param("Messages", widget="textarea", advanced=True)]
System = Annotated[str, Param("System", widget="textarea")]
TopP = Annotated[float, Param("Top p", min=0, max=1, step=0.05, advanced=True)]
Seed = Annotated[int, Param("Seed", widget="seed", advanced=True)]
Tools = Annotated[list[dict[str, Any]], Param("Tools", widget="textarea", advanced=True)]
Stop = Annotated[list[str], Param("Stop", widget="textarea", advanced=True)]
#: OpenAI's ``response_format`` as the /openai/v1 routes pass it (``text/complete`` takes it too).
ResponseFormat = Annotated[dict[str, Any], Param("Response format", internal=True)]

#: Statuses worth another try: rate limited, overloaded (Anthropic), unavailable.
RETRYABLE: Final = frozenset({429, 503, 529})
#: Tries of one call at most: the first and two retries, as the providers' SDKs default to.
MAX_TRIES: Final = 3
#: Seconds between tries at least, whatever ``Retry-After`` says (``0``, ``-1``...), and at most.
MIN_WAIT: Final = 0.5
MAX_WAIT: Final = 30.0
#: Seconds of the call timeout kept back for the last try's own answer.
MARGIN: Final = 5.0


class UpstreamError(Exception):
    """The provider answered with an error: names the provider, the status and its message."""

    def __init__(self, provider: str, status: int | None, message: str) -> None:
        where = f"{status}" if status is not None else "no status"
        super().__init__(f"{provider} API error ({where}): {message}")
        self.provider = provider
        self.status = status
        self.upstream_message = message


class RateLimited(UpstreamError):
    """The provider kept answering 429 (rate limited) until this call gave up."""


class Streamed:
    """Collects a reply while streaming its text and thinking; records whether anything was
    streamed (a retry after that would repeat it)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.text: list[str] = []
        self.thinking: list[str] = []
        self.tool_calls: list[ToolCall] = []
        self.usage = Usage()
        self.started = False

    def add_text(self, piece: str) -> None:
        if piece and not self.ctx.cancelled:  # a call left behind by a cancel streams nothing
            self.started = True
            self.text.append(piece)
            self.ctx.stream("text", piece)

    def add_thinking(self, piece: str) -> None:
        if piece and not self.ctx.cancelled:
            self.started = True
            self.thinking.append(piece)
            self.ctx.stream("thinking", piece)

    def add_tool_call(self, call_id: str, name: str, arguments: Any) -> None:
        args = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
        self.tool_calls.append(ToolCall(id=call_id, name=name, arguments=args))

    def count(self, prompt_tokens: int | None, completion_tokens: int | None) -> None:
        """The tokens the provider says the call read and wrote (None: not said)."""
        self.usage = Usage(prompt_tokens or 0, completion_tokens or 0)

    def result(self, finish_reason: str) -> Completion:
        """The reply as the node's typed outputs (with tool calls, finish reason
        ``tool_calls``)."""
        return Completion(
            text="".join(self.text),
            thinking="".join(self.thinking),
            tool_calls=tuple(self.tool_calls),
            finish_reason=finish_reason,
            usage=self.usage,
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


#: How often a call waiting on its SDK thread looks for a cancel (seconds).
CANCEL_TICK: Final = 0.05


def cancellable(ctx: Context, work: Callable[[], T]) -> T:
    """``work()`` (blocking SDK calls) run in a thread of its own, so that a cancel (a timeout
    of this call, its client gone) ends the call at once even while ``work`` is stuck in a read
    an upstream never answers: the call stops, the worker's other calls go on, and the thread
    is left to end with its read (the SDK's own timeout), streaming nothing more."""
    result: list[T] = []
    failure: list[BaseException] = []
    done = threading.Event()

    def run() -> None:
        try:
            result.append(work())
        except BaseException as exc:
            failure.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name="inline-hosted-call", daemon=True).start()
    while not done.wait(CANCEL_TICK):
        ctx.check_cancelled()
    if failure:
        raise failure[0]
    return result[0]


def with_retries(
    ctx: Context,
    attempt: Callable[[], T],
    status_of: Callable[[BaseException], tuple[int | None, str, float | None] | None],
    provider: str,
    can_retry: Callable[[], bool] = lambda: True,
) -> T:
    """Run ``attempt``; on a retryable upstream status, wait (exponential backoff with jitter,
    or the server's ``Retry-After``, never under ``MIN_WAIT``) and try again, ``MAX_TRIES``
    tries at most and not past the call's deadline. ``status_of`` maps an SDK exception to
    (status, message, retry-after) or None (not an API error). Raises ``RateLimited`` when the
    last answer was a 429, else ``UpstreamError``."""
    deadline = call_deadline()
    delay = MIN_WAIT
    for tries in range(1, MAX_TRIES + 1):
        try:
            return attempt()
        except Exception as exc:
            info = status_of(exc)
            if info is None:
                raise
            status, message, retry_after = info
            backoff = delay * (1 + random.random() / 2)
            wait = min(MAX_WAIT, max(MIN_WAIT, retry_after if retry_after else backoff))
            retry = status in RETRYABLE and can_retry() and tries < MAX_TRIES
            if not retry or time.monotonic() + wait > deadline:
                if status == 429:
                    raise RateLimited(
                        provider, status, f"rate limited, gave up after {tries} tries: {message}"
                    ) from None
                raise UpstreamError(provider, status, message) from None
            ctx.log.warning(
                "%s API answered %s (try %d); retrying in %.1f s", provider, status, tries, wait
            )
            if ctx.wait_cancelled(wait):
                ctx.check_cancelled()
            delay = min(delay * 2, MAX_WAIT)
    raise AssertionError("unreachable: the last try returns or raises")


def retry_after_of(headers: Any) -> float | None:
    """The ``Retry-After`` header's seconds, if positive (``0``, ``-1`` or a date: None, as the
    providers' SDKs read it)."""
    try:
        raw = headers.get("retry-after") if headers is not None else None
        seconds = float(raw) if raw else 0.0
    except (TypeError, ValueError):
        return None
    return min(60.0, seconds) if seconds > 0 else None


def refused(node_type: str, path: str, message: str) -> ParamsInvalid:
    """The error for params the node cannot send (a user's mistake, not the node's bug)."""
    return ParamsInvalid(node_type, [ParamIssue(path, message)])


def json_format(node_type: str, response_format: dict[str, Any]) -> tuple[str, Any] | None:
    """``(kind, schema)`` of ``response_format``: ``json_object`` (schema None) or
    ``json_schema`` with its schema object; None for plain text or none given."""
    if not response_format or response_format.get("type") == "text":
        return None
    kind = response_format.get("type")
    if kind == "json_object":
        return kind, None
    spec = response_format.get("json_schema")
    if kind != "json_schema" or not isinstance(spec, dict):
        raise refused(node_type, "$.response_format", "must be {'type': 'text'}, "
                      "{'type': 'json_object'} or {'type': 'json_schema', 'json_schema': "
                      "{'schema': {...}}}")  # fmt: skip
    schema = spec.get("schema")
    if not isinstance(schema, dict):
        raise refused(node_type, "$.response_format.json_schema.schema", "must be an object")
    return kind, schema


def user_messages(
    messages: list[dict[str, Any]], prompt: str | None, node_type: str
) -> list[dict[str, Any]]:
    """The conversation: ``messages``, then the ``prompt`` input as the last user message;
    refused when it holds nothing but system messages (the providers answer those 400)."""
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise refused(node_type, f"$.messages[{i}]", "a message must be an object")
    out = [dict(m) for m in messages]
    if prompt:
        out.append({"role": "user", "content": prompt})
    if all(m.get("role") == "system" for m in out):
        raise refused(node_type, "$.messages", "nothing to complete: give a prompt or messages")
    return out


def tool_calls_of(message: dict[str, Any], i: int, node_type: str) -> list[dict[str, Any]]:
    """An assistant message's tool calls as ``{id, name, arguments}`` (arguments an object),
    refused when they are not OpenAI's ``[{id, function: {name, arguments}}]``."""
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise refused(node_type, f"$.messages[{i}].tool_calls", "must be a list")
    out = []
    for j, call in enumerate(calls):
        fn = call.get("function", call) if isinstance(call, dict) else None
        if not (
            isinstance(call, dict) and isinstance(fn, dict) and isinstance(fn.get("name"), str)
        ):
            path = f"$.messages[{i}].tool_calls[{j}]"
            raise refused(node_type, path, "must be {id, function: {name, arguments}}")
        arguments = parse_arguments(fn.get("arguments"))
        out.append({"id": str(call.get("id") or ""), "name": fn["name"], "arguments": arguments})
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
