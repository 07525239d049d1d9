"""``ChatCompletion``: the base of chat-completion nodes (torch-free; a model imports its own).

A subclass names its node in the class statement and implements ``complete``, which returns a
typed ``Completion``; ``complete``'s keyword-only arguments are the node's params, declared as
on any node, and include the chat params a chat request sets (``CHAT_PARAMS``)::

    class Echo(ChatCompletion, type="acme/echo", title="Echo"):
        def complete(self, ctx, prompt, *, model: Annotated[str, Param("Model")] = "", ...):
            return Completion(text=prompt or "", usage=Usage(prompt_tokens=1))

The base declares the rest: the input ``prompt`` (the last user message) and the outputs every
chat client reads, ``text`` and ``thinking`` (stream them with ``ctx.stream``), ``tool_calls``
(``[{id, name, arguments}]``, ``arguments`` JSON text), ``finish_reason`` (``stop``, ``length``,
``tool_calls``), ``usage`` (``{prompt_tokens, completion_tokens}``) and, since SDK 1.6,
``logprobs`` (``[{token, logprob, bytes, top_logprobs}]``, empty unless asked for: a node of
an older SDK has no such output, read as empty). ``tool_calls``, ``usage`` and ``logprobs`` are
JSON values: the base writes them with one encoder (their ports carry the JSON
as text, so each is a take like any text output) and the host reads them back with
``read_completion``, one decoder of the same types.

A node whose descriptor has this shape is a chat node (``is_chat_node``): the host finds chat
models by it, never by node id. The ``model`` param says where the models come from: a picker
of ``llm`` folders of the architecture the node runs (``options_from="llm",
architecture="causal"``), or a provider's model names (a plain string: a hosted node, its
namespace the provider, its key named by a ``*_secret`` param).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Annotated, Any, Final, NamedTuple

import msgspec

from ._bases import POSITIONAL, NodeBase, declare_run, keyword_params
from ._context import Context
from ._declare import Output, Port
from ._descriptor import Descriptor
from ._errors import NodeDeclarationError

#: The params a chat request sets, which every chat node declares.
CHAT_PARAMS: Final = (
    "model", "messages", "system", "tools", "stop", "max_new_tokens", "temperature", "top_p",
    "seed",
)  # fmt: skip
#: The outputs a chat node has at least (``thinking`` and ``usage`` read as empty without).
CHAT_OUTPUTS: Final = ("text", "tool_calls", "finish_reason")
PROMPT_PORT = Annotated[str | None, Port("Prompt")]


class ToolCall(msgspec.Struct, frozen=True):
    """One call the model asked for: ``arguments`` is JSON text (OpenAI's shape)."""

    id: str
    name: str
    arguments: str


class Usage(msgspec.Struct, frozen=True):
    """Tokens read and written by one completion."""

    prompt_tokens: int = 0
    completion_tokens: int = 0


class TopLogprob(msgspec.Struct, frozen=True):
    """One of the likeliest tokens at a position: its text, log-probability and UTF-8 bytes."""

    token: str
    logprob: float
    bytes: tuple[int, ...] = ()


class TokenLogprob(msgspec.Struct, frozen=True):
    """A generated token's log-probability (``logprob`` <= 0), and the likeliest tokens at its
    position, most likely first (OpenAI's ``logprobs.content`` entry). Since SDK 1.6."""

    token: str
    logprob: float
    bytes: tuple[int, ...] = ()
    top_logprobs: tuple[TopLogprob, ...] = ()


class Completion(msgspec.Struct, frozen=True, kw_only=True):
    """What a chat node answered. With tool calls the finish reason is ``tool_calls``.
    ``logprobs`` holds one entry per generated token when the call asked for them."""

    text: str = ""
    thinking: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str = "stop"
    usage: Usage = msgspec.field(default_factory=Usage)
    logprobs: tuple[TokenLogprob, ...] = ()


class ChatOutputs(NamedTuple):
    """The output ports of a chat node (the JSON values as their text)."""

    text: Annotated[str, Output(label="Text")]
    thinking: Annotated[str, Output(label="Thinking")]
    tool_calls: Annotated[str, Output(label="Tool calls (JSON)")]
    finish_reason: Annotated[str, Output(label="Finish reason")]
    usage: Annotated[str, Output(label="Usage (JSON)")]
    logprobs: Annotated[str, Output(label="Logprobs (JSON)")]


_encoder = msgspec.json.Encoder()
_tool_calls = msgspec.json.Decoder(tuple[ToolCall, ...])
_usage = msgspec.json.Decoder(Usage)
_logprobs = msgspec.json.Decoder(tuple[TokenLogprob, ...])


def completion_outputs(done: Completion) -> ChatOutputs:
    """``done`` as a chat node's output values."""
    return ChatOutputs(
        text=done.text,
        thinking=done.thinking,
        tool_calls=_encoder.encode(done.tool_calls).decode(),
        finish_reason="tool_calls" if done.tool_calls else done.finish_reason,
        usage=_encoder.encode(done.usage).decode(),
        logprobs=_encoder.encode(done.logprobs).decode(),
    )


def read_completion(outputs: Mapping[str, str]) -> Completion:
    """A chat node's outputs (each port's text, as its takes hold it) as a ``Completion``;
    raises ``msgspec.DecodeError`` when ``tool_calls`` or ``usage`` is not the declared JSON."""
    return Completion(
        text=outputs.get("text", ""),
        thinking=outputs.get("thinking", ""),
        tool_calls=_tool_calls.decode(outputs.get("tool_calls") or "[]"),
        finish_reason=outputs.get("finish_reason") or "stop",
        usage=_usage.decode(outputs.get("usage") or "{}"),
        logprobs=_logprobs.decode(outputs.get("logprobs") or "[]"),
    )


def is_chat_node(descriptor: Descriptor) -> bool:
    """Whether ``descriptor`` has the chat contract's shape: a ``prompt`` text input, the
    ``CHAT_OUTPUTS`` as text, the ``CHAT_PARAMS`` in its schema (what ``ChatCompletion``
    declares; a node declared by hand with the same shape is one too)."""
    prompt = descriptor.input("prompt")
    if prompt is None or prompt.kind != "text":
        return False
    for port_id in CHAT_OUTPUTS:
        port = descriptor.output(port_id)
        if port is None or port.kind != "text":
            return False
    properties = descriptor.params_schema.get("properties")
    return isinstance(properties, dict) and all(k in properties for k in CHAT_PARAMS)


class ChatCompletion(NodeBase):
    """Base of chat-completion nodes (see the module docstring). ``spec`` is the declared node
    (return it from ``inline_nodes``); one instance per worker keeps what it loaded."""

    _output_kind = "text"
    _category = "Text"
    _icon = "message"

    @classmethod
    def _declare(cls, node_type: str) -> Any:
        return _make_run(cls, node_type)

    def complete(self, ctx: Context, prompt: str | None, **params: Any) -> Completion:
        """Answer the conversation (``params["messages"]``, then ``prompt`` as the last user
        message); stream ``text`` and ``thinking`` with ``ctx.stream`` as they come."""
        raise NotImplementedError(f"{type(self).__name__} must implement complete")


def _make_run(cls: type[ChatCompletion], node_type: str) -> Any:
    """A ``run(self, ctx, prompt, *, <complete's params>)`` for ``build_spec`` to declare."""
    params = keyword_params(cls, ChatCompletion, "complete", node_type, "self, ctx, prompt")
    missing = [k for k in CHAT_PARAMS if k not in {p.name for p in params}]
    if missing:
        raise NodeDeclarationError(
            [f"node '{node_type}': complete(self, ctx, prompt, *, ...) must declare the chat "
             f"params {missing} (a chat request sets them)"]
        )  # fmt: skip

    def run(self: ChatCompletion, ctx: Context, prompt: str | None = None, **values: Any) -> Any:
        done = self.complete(ctx, prompt, **values)
        if not isinstance(done, Completion):
            raise TypeError(
                f"{node_type}: complete returned {type(done).__name__}, not a Completion"
            )
        return completion_outputs(done)

    head = [inspect.Parameter("prompt", POSITIONAL, default=None, annotation=PROMPT_PORT)]
    return declare_run(cls, run, head, params, ChatOutputs)
