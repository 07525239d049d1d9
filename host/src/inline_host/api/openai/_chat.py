"""Mapping OpenAI chat requests onto runs of a chat node, and its outputs back (the node's
typed outputs, read with the SDK's own decoder: ``read_completion``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

import msgspec
from inline_sdk.chat import read_completion

from ...runs import RunService, RunState
from ._schemas import (
    ChatChunk,
    ChatRequest,
    ChunkChoice,
    Delta,
    FunctionCall,
    OpenAIError,
    ToolCall,
    ToolCallDelta,
    Usage,
)

NODE_ID: Final = "complete"
#: Argument fragments of a streamed tool call are at most this many characters.
ARGUMENT_PIECE: Final = 16
#: A seed is a signed 64-bit integer (what crosses to a pack, and what OpenAI takes).
SEED_RANGE: Final = range(-(2**63), 2**63)


def _content(msg: dict[str, Any], i: int) -> str:
    content = msg.get("content")
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):  # content parts: only text is understood
        texts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text":
                raise OpenAIError(
                    400,
                    f"messages[{i}].content[{j}]: only text parts are supported",
                    param=f"messages[{i}].content",
                )
            texts.append(str(part.get("text", "")))
        return "".join(texts)
    raise OpenAIError(400, f"messages[{i}].content must be a string or a list of parts",
                      param=f"messages[{i}].content")  # fmt: skip


def _tool_calls(calls: Any, i: int) -> list[dict[str, Any]]:
    """An assistant message's ``tool_calls`` as OpenAI sends them, each checked:
    ``{id, type: "function", function: {name, arguments}}`` with strings throughout."""
    where = f"messages[{i}].tool_calls"
    if not isinstance(calls, list):
        raise OpenAIError(400, f"{where} must be a list of tool calls", param=where)
    out = []
    for j, call in enumerate(calls):
        at = f"{where}[{j}]"
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(call, dict) or not isinstance(fn, dict):
            raise OpenAIError(400, f"{at} must be an object with a 'function' object", param=at)
        if call.get("type", "function") != "function":
            raise OpenAIError(400, f"{at}.type must be 'function'", param=f"{at}.type")
        for key, value in (("id", call.get("id")), ("function.name", fn.get("name"))):
            if not isinstance(value, str) or not value:
                raise OpenAIError(
                    400, f"{at}.{key} must be a non-empty string", param=f"{at}.{key}"
                )
        arguments = fn.get("arguments", "")
        if not isinstance(arguments, str):
            raise OpenAIError(400, f"{at}.function.arguments must be a string (of JSON)",
                              param=f"{at}.function.arguments")  # fmt: skip
        function = {"name": fn["name"], "arguments": arguments}
        out.append({"id": call["id"], "type": "function", "function": function})
    return out


def messages_param(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The node's ``messages``: roles checked, content parts joined, tool calls checked (a
    conversation of system messages alone has nothing to answer)."""
    if not messages:
        raise OpenAIError(400, "messages must not be empty", param="messages")
    out = []
    for i, msg in enumerate(messages):
        role = msg.get("role") if isinstance(msg, dict) else None
        if role == "developer":
            role = "system"
        if role not in ("system", "user", "assistant", "tool"):
            raise OpenAIError(400, f"messages[{i}].role {role!r} is not supported",
                              param=f"messages[{i}].role")  # fmt: skip
        item: dict[str, Any] = {"role": role, "content": _content(msg, i)}
        calls = _tool_calls(msg["tool_calls"], i) if msg.get("tool_calls") is not None else []
        if role == "assistant" and calls:
            item["tool_calls"] = calls
        if role == "tool" and msg.get("tool_call_id") is not None:
            if not isinstance(msg["tool_call_id"], str):
                raise OpenAIError(400, f"messages[{i}].tool_call_id must be a string",
                                  param=f"messages[{i}].tool_call_id")  # fmt: skip
            item["tool_call_id"] = msg["tool_call_id"]
        out.append(item)
    if all(m["role"] == "system" for m in out):
        raise OpenAIError(400, "messages hold only system messages: add a user message to "
                          "answer", param="messages")  # fmt: skip
    return out


def run_request(
    req: ChatRequest, node_type: str, base: Mapping[str, Any], raw_tools: Any = None
) -> dict[str, Any]:
    """The ``/v1`` run request for one chat completion on the chat node ``node_type``, with
    ``base``, the params that select the model (``raw_tools``: the tools exactly as sent, so the
    chat template renders them as the client wrote them)."""
    if req.n not in (None, 1):
        raise OpenAIError(400, "only n=1 is supported", param="n")
    params: dict[str, Any] = {**base, "messages": messages_param(req.messages)}
    max_new = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    if max_new is not None:
        if max_new < 1:
            raise OpenAIError(400, "max_tokens must be at least 1", param="max_tokens")
        params["max_new_tokens"] = max_new
    if req.temperature is not None:
        if not 0 <= req.temperature <= 2:
            raise OpenAIError(400, "temperature must be between 0 and 2", param="temperature")
        params["temperature"] = req.temperature
    if req.top_p is not None:
        if not 0 <= req.top_p <= 1:
            raise OpenAIError(400, "top_p must be between 0 and 1", param="top_p")
        params["top_p"] = req.top_p
    if req.seed is not None:
        if req.seed not in SEED_RANGE:
            raise OpenAIError(400, "seed must be a 64-bit integer (from -2**63 to 2**63 - 1)",
                              param="seed")  # fmt: skip
        params["seed"] = req.seed
    if req.stop:
        params["stop"] = [req.stop] if isinstance(req.stop, str) else list(req.stop)
    if req.tools and req.tool_choice != "none":
        params["tools"] = (
            raw_tools if isinstance(raw_tools, list) else msgspec.to_builtins(req.tools)
        )
    return chat_graph(node_type, params)


def chat_graph(node_type: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The ``/v1`` run request of one call of the chat node ``node_type`` (its id ``NODE_ID``)."""
    return {
        "graph": {
            "schemaVersion": 1,
            "nodes": [{"id": NODE_ID, "type": node_type, "params": dict(params)}],
        },
        "target": NODE_ID,
    }


def outputs_of(service: RunService, state: RunState) -> dict[str, str]:
    """The text outputs of the run's ``NODE_ID`` (one take per output port), by port."""
    out: dict[str, str] = {}
    for take in state.takes:
        record = service.take(take.id)
        path = service.take_file(record) if record is not None else None
        if record is not None and path is not None and take.node_id == NODE_ID:
            out[record.port] = path.read_text(encoding="utf-8")
    return out


def tool_calls(outputs: Mapping[str, str]) -> list[ToolCall]:
    """The node's ``tool_calls`` output as OpenAI tool calls."""
    return [
        ToolCall(id=c.id, function=FunctionCall(name=c.name, arguments=c.arguments))
        for c in read_completion(outputs).tool_calls
    ]


def usage(outputs: Mapping[str, str]) -> Usage:
    """The node's ``usage`` output as OpenAI's."""
    used = read_completion(outputs).usage
    prompt, completion = used.prompt_tokens, used.completion_tokens
    return Usage(prompt_tokens=prompt, completion_tokens=completion,
                 total_tokens=prompt + completion)  # fmt: skip


class Chunks:
    """Builds the stream's chunks for one completion (all with one id, created and model)."""

    def __init__(self, completion_id: str, created: int, model: str) -> None:
        self.id, self.created, self.model = completion_id, created, model

    def chunk(self, delta: Delta, finish: str | None = None, usage: Usage | None = None) -> bytes:
        body = ChatChunk(
            id=self.id,
            created=self.created,
            model=self.model,
            choices=[ChunkChoice(index=0, delta=delta, finish_reason=finish)],
            usage=usage,
        )
        return b"data: " + msgspec.json.encode(body) + b"\n\n"

    def usage_chunk(self, used: Usage) -> bytes:
        body = ChatChunk(id=self.id, created=self.created, model=self.model, choices=[],
                         usage=used)  # fmt: skip
        return b"data: " + msgspec.json.encode(body) + b"\n\n"

    def tool_call_chunks(self, calls: list[ToolCall]) -> Iterator[bytes]:
        """Each call as OpenAI streams it: index, id, type and name first, then its arguments
        in fragments."""
        for i, call in enumerate(calls):
            name = FunctionCall(name=call.function.name, arguments="")
            head = ToolCallDelta(index=i, id=call.id, type="function", function=name)
            yield self.chunk(Delta(tool_calls=[head]))
            args = call.function.arguments or ""
            for start in range(0, len(args), ARGUMENT_PIECE):
                piece = ToolCallDelta(
                    index=i, function=FunctionCall(arguments=args[start : start + ARGUMENT_PIECE])
                )
                yield self.chunk(Delta(tool_calls=[piece]))


DONE: Final = b"data: [DONE]\n\n"
