"""Mapping Anthropic's Messages requests onto a chat node's params, and its outputs back.

A chat node takes OpenAI-style messages (``inline_sdk.chat``): a ``system`` message first, user
text, assistant text with ``tool_calls``, ``tool`` messages with their ``tool_call_id``. So
``system`` (a string or text blocks) becomes the first message; a user turn's blocks become, in
order, a ``tool`` message per ``tool_result`` and a user message per run of text blocks; an
assistant turn's text blocks are joined and its ``tool_use`` blocks become its ``tool_calls``.
Thinking blocks sent back are accepted and not shown to the model (chat templates drop earlier
reasoning). Images and documents are refused by name.

What a node cannot do is a 400 naming it, never ignored: ``top_k``, ``tool_choice`` of ``any``
or ``tool`` (no chat node can force a call), a final assistant message (a prefill: a chat
node answers in a new turn). ``tool_choice: none`` leaves the tools out; ``thinking`` shows the
node's ``thinking`` output as a thinking block (with ``budget_tokens`` as ``thinking_budget``
where the node declares one, as ``anthropic/complete`` does), and without it no thinking block
is answered. A thinking block's ``signature`` is a digest of its text (no provider signed it).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec
from inline_sdk import Descriptor
from inline_sdk.chat import read_completion

from ._schemas import (
    AnthropicError,
    ContentOut,
    CountTokensRequest,
    CustomTool,
    DocumentBlock,
    ImageBlock,
    MessageParam,
    MessagesRequest,
    RedactedThinkingBlock,
    TextBlock,
    TextOut,
    ThinkingBlock,
    ThinkingDisabled,
    ThinkingEnabled,
    ThinkingOut,
    ToolChoiceAny,
    ToolChoiceNone,
    ToolChoiceTool,
    ToolResultBlock,
    ToolUseBlock,
    ToolUseOut,
    UsageOut,
    invalid,
)

#: Anthropic's least thinking budget (``thinking.budget_tokens``).
MIN_BUDGET: Final = 1024
#: Stop reasons by the chat node's finish reason.
STOP_REASONS: Final = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
#: What joins a turn's text blocks.
JOIN: Final = "\n\n"


@dataclass(frozen=True, slots=True)
class Plan:
    """What one request asks of the chat node: its params, and how to answer its outputs."""

    params: dict[str, Any]
    #: answer the ``thinking`` output as a thinking block (``omit``: its text left out)
    thinking: bool = False
    omit_thinking: bool = False
    #: at most one tool call (``disable_parallel_tool_use``)
    one_tool: bool = False


def _refused(where: str, what: str) -> AnthropicError:
    return AnthropicError(400, f"{where}: {what}")


def _texts(blocks: Sequence[Any], where: str) -> str:
    """Text blocks (a tool result's, the system's) joined; anything else refused by name."""
    out = []
    for j, block in enumerate(blocks):
        if not isinstance(block, TextBlock):
            kind = "image" if isinstance(block, ImageBlock) else "document"
            raise _refused(f"{where}.{j}", f"{kind} blocks are not supported: the chat models "
                           "here read text")  # fmt: skip
        out.append(block.text)
    return JOIN.join(out)


def _user_turn(blocks: Sequence[Any], where: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    text: list[str] = []

    def flush() -> None:
        if text:
            out.append({"role": "user", "content": JOIN.join(text)})
            text.clear()

    for j, block in enumerate(blocks):
        at = f"{where}.content.{j}"
        if isinstance(block, TextBlock):
            text.append(block.text)
        elif isinstance(block, ToolResultBlock):
            flush()
            content = block.content
            result = content if isinstance(content, str) else _texts(content, f"{at}.content")
            if block.is_error:
                result = f"Error: {result}"
            out.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": result})
        elif isinstance(block, ImageBlock | DocumentBlock):
            kind = "image" if isinstance(block, ImageBlock) else "document"
            raise _refused(at, f"{kind} blocks are not supported: the chat models here read text")
        else:
            raise _refused(at, f"a user message cannot hold a {_type_of(block)} block")
    flush()
    return out


def _assistant_turn(blocks: Sequence[Any], where: str) -> dict[str, Any]:
    text: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(blocks):
        if isinstance(block, TextBlock):
            text.append(block.text)
        elif isinstance(block, ToolUseBlock):
            arguments = json.dumps(block.input, ensure_ascii=False)
            function = {"name": block.name, "arguments": arguments}
            calls.append({"id": block.id, "type": "function", "function": function})
        elif not isinstance(block, ThinkingBlock | RedactedThinkingBlock):
            what = f"an assistant message cannot hold a {_type_of(block)} block"
            raise _refused(f"{where}.content.{j}", what)
    message: dict[str, Any] = {"role": "assistant", "content": JOIN.join(text)}
    if calls:
        message["tool_calls"] = calls
    return message


def _type_of(block: Any) -> str:
    return str(type(block).__struct_config__.tag)


def conversation(
    system: str | list[TextBlock] | None, messages: list[MessageParam], *, answer: bool = True
) -> list[dict[str, Any]]:
    """The node's ``messages`` (``answer``: the conversation must end with a user turn for a new
    reply; a count may end anywhere)."""
    if not messages:
        raise _refused("messages", "at least one message is required")
    out: list[dict[str, Any]] = []
    sys_text = system if isinstance(system, str) or system is None else _texts(system, "system")
    if sys_text:
        out.append({"role": "system", "content": sys_text})
    for i, msg in enumerate(messages):
        where = f"messages.{i}"
        if isinstance(msg.content, str):
            out.append({"role": msg.role, "content": msg.content})
        elif msg.role == "user":
            out += _user_turn(msg.content, where)
        else:
            out.append(_assistant_turn(msg.content, where))
    if answer and messages[-1].role == "assistant":
        raise _refused(
            f"messages.{len(messages) - 1}",
            "a final assistant message (a prefill) is not supported: the chat models here "
            "answer in a new turn, so end with a user message",
        )
    return out


def tool_specs(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Anthropic's client tools as the node's OpenAI-style function specs."""
    out = []
    for i, raw in enumerate(tools):
        kind = raw.get("type") if isinstance(raw, dict) else None
        if kind not in (None, "custom"):
            what = f"{kind!r} tools (Anthropic's server tools) are not supported: only client "
            raise _refused(f"tools.{i}.type", what + "tools (name, description, input_schema)")
        try:
            tool = msgspec.convert(raw, CustomTool)
        except msgspec.ValidationError as exc:
            raise invalid(exc, f"tools.{i}") from None
        function: dict[str, Any] = {"name": tool.name}  # in OpenAI's order: templates keep it
        if tool.description is not None:
            function["description"] = tool.description
        function["parameters"] = tool.input_schema
        if tool.strict is not None:
            function["strict"] = tool.strict
        out.append({"type": "function", "function": function})
    return out


def declared_params(descriptor: Descriptor | None) -> frozenset[str]:
    """The params the node's schema declares."""
    properties = descriptor.params_schema.get("properties") if descriptor is not None else None
    return frozenset(properties) if isinstance(properties, dict) else frozenset()


def _tools(req: MessagesRequest | CountTokensRequest, model: str) -> tuple[list[Any], bool]:
    """The tool specs to send, and whether at most one call is wanted."""
    choice = req.tool_choice
    if isinstance(choice, ToolChoiceAny | ToolChoiceTool):
        raise _refused("tool_choice.type", f"{choice.__struct_config__.tag!r} is not supported "
                       f"for the model {model!r}: its node cannot force a tool call (use 'auto' "
                       "or 'none')")  # fmt: skip
    if not req.tools or isinstance(choice, ToolChoiceNone):
        return [], False
    return tool_specs(req.tools), bool(choice is not None and choice.disable_parallel_tool_use)


def count_params(req: CountTokensRequest, base: Mapping[str, Any]) -> dict[str, Any]:
    """The counting node's params for ``req`` (``base``: the params that select the model)."""
    specs, _ = _tools(req, req.model)
    params = {**base, "messages": conversation(req.system, req.messages, answer=False)}
    if specs:
        params["tools"] = specs
    return params


def plan(req: MessagesRequest, base: Mapping[str, Any], declared: frozenset[str]) -> Plan:
    """What ``req`` asks of the chat node whose schema declares ``declared`` (``base``: the
    params that select the model)."""
    if req.max_tokens < 1:
        raise _refused("max_tokens", "must be at least 1")
    params: dict[str, Any] = {
        **base,
        "messages": conversation(req.system, req.messages),
        "max_new_tokens": req.max_tokens,
    }
    for key, value in (("temperature", req.temperature), ("top_p", req.top_p)):
        if value is not None:
            if not 0 <= value <= 1:
                raise _refused(key, "must be between 0 and 1")
            params[key] = value
    if req.top_k is not None:
        if "top_k" not in declared:
            raise _refused("top_k", f"not supported for the model {req.model!r} (its node "
                           "samples without one)")  # fmt: skip
        if req.top_k < 1:
            raise _refused("top_k", "must be at least 1")
        params["top_k"] = req.top_k
    if req.stop_sequences:
        params["stop"] = list(req.stop_sequences)
    specs, one_tool = _tools(req, req.model)
    if specs:
        params["tools"] = specs
    thinking = req.thinking
    if isinstance(thinking, ThinkingEnabled):
        if not MIN_BUDGET <= thinking.budget_tokens < req.max_tokens:
            raise _refused("thinking.enabled.budget_tokens", f"must be at least {MIN_BUDGET} "
                           "and less than max_tokens")  # fmt: skip
        if "thinking_budget" in declared:
            params["thinking_budget"] = thinking.budget_tokens
    shown = thinking is not None and not isinstance(thinking, ThinkingDisabled)
    omitted = shown and getattr(thinking, "display", None) == "omitted"
    return Plan(params, thinking=shown, omit_thinking=omitted, one_tool=one_tool)


def signature(thinking: str) -> str:
    """A thinking block's ``signature``: a digest of its text (no provider signed it here)."""
    return base64.b64encode(hashlib.sha256(thinking.encode()).digest()).decode()


def tool_id(call_id: str) -> str:
    """A node's tool call id as Anthropic's (``toolu_...``)."""
    return call_id if call_id.startswith("toolu_") else f"toolu_{call_id.removeprefix('call_')}"


def tool_uses(outputs: Mapping[str, str], how: Plan) -> list[ToolUseOut]:
    """The node's ``tool_calls`` output as ``tool_use`` blocks (their arguments an object)."""
    out = []
    for call in read_completion(outputs).tool_calls:
        try:
            arguments = json.loads(call.arguments or "{}")
        except json.JSONDecodeError:
            arguments = {}
        out.append(ToolUseOut(id=tool_id(call.id), name=call.name,
                              input=arguments if isinstance(arguments, dict) else {}))  # fmt: skip
    return out[:1] if how.one_tool else out


def content(outputs: Mapping[str, str], how: Plan) -> list[ContentOut]:
    """The reply's content blocks: thinking (when asked for), text, tool uses."""
    done = read_completion(outputs)
    blocks: list[ContentOut] = []
    if how.thinking and done.thinking:
        shown = "" if how.omit_thinking else done.thinking
        blocks.append(ThinkingOut(thinking=shown, signature=signature(done.thinking)))
    if done.text:
        blocks.append(TextOut(text=done.text))
    return [*blocks, *tool_uses(outputs, how)]


def stop_of(outputs: Mapping[str, str]) -> tuple[str, str | None]:
    """The reply's ``stop_reason`` and ``stop_sequence`` (a node that reports the stop string
    it met, as its ``stop_sequence`` output, ends on ``stop_sequence``)."""
    hit = outputs.get("stop_sequence") or None
    if hit is not None:
        return "stop_sequence", hit
    finish = read_completion(outputs).finish_reason
    return STOP_REASONS.get(finish, "end_turn"), None


def usage_of(outputs: Mapping[str, str]) -> UsageOut:
    used = read_completion(outputs).usage
    return UsageOut(input_tokens=used.prompt_tokens, output_tokens=used.completion_tokens)
