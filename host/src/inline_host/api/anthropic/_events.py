"""A streamed reply as Anthropic's server-sent events.

``message_start`` (the message with empty content; usage is known only at the end, so it says
0 tokens and ``message_delta`` has the totals, as cumulative counts), a ``ping``, then one
content block at a time: ``content_block_start``, its deltas (``thinking_delta`` then a
``signature_delta``, ``text_delta``, ``input_json_delta`` fragments of a tool's input), and
``content_block_stop``; then ``message_delta`` (stop reason, usage) and ``message_stop``. A run
that fails after the stream began ends it with ``event: error`` in the error's shape.
"""

from __future__ import annotations

import json
from typing import Any, Final

import msgspec

from ._messages import Plan, signature
from ._schemas import AnthropicError, MessageOut, ToolUseOut, UsageOut

#: A tool's input streams in fragments of at most this many characters.
INPUT_PIECE: Final = 16

_encode = msgspec.json.Encoder().encode


def event(name: str, data: Any) -> bytes:
    """One server-sent event: ``event: <name>`` and its JSON (``type`` is the event's name)."""
    return b"event: " + name.encode() + b"\ndata: " + _encode(data) + b"\n\n"


class Events:
    """The events of one streamed reply, in order: which block is open, and its index."""

    def __init__(self, message_id: str, model: str, how: Plan) -> None:
        self.id, self.model, self.how = message_id, model, how
        self.index = -1
        self.open: str | None = None  # the type of the block being streamed
        self.thinking = ""  # the thinking block's text so far (its signature's)
        self.streamed = {"text": "", "thinking": ""}

    def start(self) -> bytes:
        empty = MessageOut(id=self.id, role="assistant", model=self.model, content=[],
                           stop_reason=None, stop_sequence=None,
                           usage=UsageOut(input_tokens=0, output_tokens=0))  # fmt: skip
        return event("message_start", {"type": "message_start", "message": empty}) + event(
            "ping", {"type": "ping"}
        )

    def piece(self, port: str, text: str) -> bytes:
        """A piece of the node's ``text`` or ``thinking`` output (thinking left out when the
        request did not ask for it)."""
        if port not in self.streamed or not text:
            return b""
        self.streamed[port] += text
        if port == "thinking":
            if not self.how.thinking:
                return b""
            head = self._switch("thinking", {"type": "thinking", "thinking": "", "signature": ""})
            self.thinking += text
            if self.how.omit_thinking:
                return head
            delta = {"type": "thinking_delta", "thinking": text}
        else:
            head = self._switch("text", {"type": "text", "text": ""})
            delta = {"type": "text_delta", "text": text}
        return head + self._delta(delta)

    def rest(self, outputs: dict[str, str]) -> bytes:
        """What the node did not stream of its outputs (a pack that does not stream, or a retry
        that attached late), in one piece per output."""
        out = b""
        for port in ("thinking", "text"):
            final, sent = outputs.get(port, ""), self.streamed[port]
            if final.startswith(sent) and len(final) > len(sent):
                out += self.piece(port, final[len(sent) :])
        return out

    def end(self, tools: list[ToolUseOut], stop: tuple[str, str | None], used: UsageOut) -> bytes:
        out = self._close()
        for tool in tools:
            out += self._open("tool_use", {"type": "tool_use", "id": tool.id, "name": tool.name,
                                           "input": {}})  # fmt: skip
            arguments = json.dumps(tool.input, ensure_ascii=False)
            for at in range(0, len(arguments), INPUT_PIECE):
                piece = arguments[at : at + INPUT_PIECE]
                out += self._delta({"type": "input_json_delta", "partial_json": piece})
            out += self._close()
        reason, sequence = stop
        delta = {"stop_reason": reason, "stop_sequence": sequence}
        out += event("message_delta", {"type": "message_delta", "delta": delta, "usage": used})
        return out + event("message_stop", {"type": "message_stop"})

    def failed(self, exc: AnthropicError) -> bytes:
        """The stream's end for a run that failed (what was open stays unfinished)."""
        return event("error", exc.body())

    def _switch(self, kind: str, block: dict[str, Any]) -> bytes:
        if self.open == kind:
            return b""
        return self._close() + self._open(kind, block)

    def _open(self, kind: str, block: dict[str, Any]) -> bytes:
        self.index += 1
        self.open = kind
        start = {"type": "content_block_start", "index": self.index, "content_block": block}
        return event("content_block_start", start)

    def _delta(self, delta: dict[str, Any]) -> bytes:
        body = {"type": "content_block_delta", "index": self.index, "delta": delta}
        return event("content_block_delta", body)

    def _close(self) -> bytes:
        if self.open is None:
            return b""
        out = b""
        if self.open == "thinking":  # the block's signature, last, as Anthropic sends it
            out += self._delta({"type": "signature_delta", "signature": signature(self.thinking)})
            self.thinking = ""
        self.open = None
        stop = {"type": "content_block_stop", "index": self.index}
        return out + event("content_block_stop", stop)
