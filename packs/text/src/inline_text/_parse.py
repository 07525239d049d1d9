"""Splitting a streamed reply into content, thinking and tool calls (no torch here).

Replies arrive as text pieces (one per token, decoded). A Qwen3-style ``<think>...</think>``
block becomes ``thinking``; each Hermes/Qwen ``<tool_call>{json}</tool_call>`` block becomes a
tool call; the rest is ``content``. Tags may arrive split across pieces (``".<"``, ``"tool"``,
``"_call"``, ``">"``): any tail of the buffer that could still grow into a tag (or a stop string)
is held back until the next piece decides, so no part of a tag ever reaches the stream. A block
whose JSON does not parse stays content, tags included, with a warning.

Whitespace at the start and end of each section is dropped (the template's newlines around the
tags), so what is streamed is exactly the final value of each output. A ``plain`` parser (a raw
completion, a reply under a grammar) knows no tags and keeps the text exactly as decoded: only
stop strings apply.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from inline_sdk.chat import ToolCall

THINK_OPEN: Final = "<think>"
THINK_CLOSE: Final = "</think>"
CALL_OPEN: Final = "<tool_call>"
CALL_CLOSE: Final = "</tool_call>"

Section = Literal["content", "thinking"]
Emit = Callable[[Section, str], None]


def parse_call(block: str) -> ToolCall | None:
    """The call in a ``<tool_call>`` block's body; None unless it is ``{"name", "arguments"}``."""
    try:
        data = json.loads(block)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not data["name"]:
        return None
    args = data.get("arguments", data.get("parameters", {}))
    if isinstance(args, str):
        try:
            json.loads(args)
        except ValueError:
            return None
        arguments = args
    elif isinstance(args, dict):
        arguments = json.dumps(args, ensure_ascii=False)
    else:
        return None
    return ToolCall(id="call_" + secrets.token_hex(12), name=data["name"], arguments=arguments)


def _held_tail(text: str, tags: Sequence[str]) -> int:
    """How many trailing characters of ``text`` could be the start of one of ``tags``."""
    best = 0
    for tag in tags:
        for n in range(min(len(tag) - 1, len(text)), best, -1):
            if text.endswith(tag[:n]):
                best = n
                break
    return best


@dataclass
class _Out:
    """One section's output: text emitted, whitespace held until more text follows."""

    section: Section
    emit: Emit
    text: str = ""
    pending: str = ""
    started: bool = False
    #: drop the whitespace around the section (False: the text exactly as decoded)
    strip: bool = True

    def push(self, piece: str) -> None:
        if not piece:
            return
        if not self.strip:
            self.text += piece
            self.emit(self.section, piece)
            return
        if not self.started:
            piece = piece.lstrip()
            if not piece:
                return
            self.started = True
        body = piece.rstrip()
        tail = piece[len(body) :]
        if body:
            out = self.pending + body
            self.pending = ""
            self.text += out
            self.emit(self.section, out)
        self.pending += tail


@dataclass
class ReplyParser:
    """Feed decoded pieces with ``feed``; ``finish`` at the end. ``emit(section, text)`` is
    called with every piece of content or thinking that is final."""

    emit: Emit
    stops: Sequence[str] = ()
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("inline.text"))
    #: the template ended its prompt inside an open think block (``enable_thinking`` templates)
    thinking_open: bool = False
    #: no tags at all: everything is content (a raw completion, a reply under a grammar)
    plain: bool = False
    calls: list[ToolCall] = field(default_factory=list)
    stopped: bool = False
    _buf: str = ""
    _mode: Literal["content", "thinking", "call"] = "content"
    _call: str = ""
    _saw_content: bool = False

    def __post_init__(self) -> None:
        self.content = _Out("content", self.emit, strip=not self.plain)
        self.thinking = _Out("thinking", self.emit)
        if self.thinking_open and not self.plain:
            self._mode = "thinking"

    @property
    def text(self) -> str:
        return self.content.text

    @property
    def reasoning(self) -> str:
        return self.thinking.text

    def feed(self, piece: str) -> None:
        """One more decoded piece of the reply."""
        if self.stopped:
            return
        self._buf += piece
        self._drain(final=False)

    def finish(self) -> None:
        """The reply ended: flush what was held, an unterminated call stays content."""
        if not self.stopped:
            self._drain(final=True)
        if self._mode == "call":
            self._malformed(CALL_OPEN + self._call, "it never closes")
        elif self._buf:
            (self.thinking if self._mode == "thinking" else self.content).push(self._buf)
        self._buf = ""

    # ----------------------------------------------------------------------------------------
    def _drain(self, *, final: bool) -> None:
        while self._buf and not self.stopped:
            if self._mode == "call":
                end = self._buf.find(CALL_CLOSE)
                if end < 0:
                    keep = 0 if final else _held_tail(self._buf, (CALL_CLOSE,))
                    self._call += self._buf[: len(self._buf) - keep]
                    self._buf = self._buf[len(self._buf) - keep :]
                    return
                self._call += self._buf[:end]
                self._buf = self._buf[end + len(CALL_CLOSE) :]
                self._close_call()
                continue
            if self._mode == "thinking":
                if not self._step(self.thinking, {THINK_CLOSE: "content"}, final):
                    return
                continue
            tags = {} if self.plain else {CALL_OPEN: "call"}
            if not self.plain and not self._saw_content and not self.reasoning:
                tags[THINK_OPEN] = "thinking"  # a think block only opens the reply
            if not self._step(self.content, tags, final):
                return

    def _step(self, out: _Out, tags: dict[str, str], final: bool) -> bool:
        """Emit what is final in this section; switch mode at the first tag. False: wait."""
        stops = self.stops if out is self.content else ()
        first, tag = len(self._buf), ""
        for t in (*tags, *stops):
            i = self._buf.find(t)
            if t == THINK_OPEN and i > 0 and self._buf[:i].strip():
                continue  # text came first: a think tag only opens a reply
            if 0 <= i < first:
                first, tag = i, t
        if tag:
            self._push(out, self._buf[:first])
            self._buf = self._buf[first + len(tag) :]
            if tag in stops:
                self.stopped = True
                self._buf = ""
                return False
            self._mode = tags[tag]  # type: ignore[assignment]
            if self._mode == "call":
                self._call = ""
            return True
        keep = 0 if final else _held_tail(self._buf, (*tags, *stops))
        self._push(out, self._buf[: len(self._buf) - keep])
        self._buf = self._buf[len(self._buf) - keep :]
        return False

    def _push(self, out: _Out, text: str) -> None:
        if out is self.content and text.strip():
            self._saw_content = True
        out.push(text)

    def _close_call(self) -> None:
        self._mode = "content"
        call = parse_call(self._call.strip())
        if call is None:
            self._malformed(CALL_OPEN + self._call + CALL_CLOSE, "its JSON is not a call")
        else:
            self.calls.append(call)
        self._call = ""

    def _malformed(self, block: str, why: str) -> None:
        self.log.warning("a <tool_call> block was left as content because %s: %.200s", why, block)
        self._mode = "content"
        self._call = ""
        self._push(self.content, block)
