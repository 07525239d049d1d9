"""``text/count-tokens``: how many tokens ``text/complete`` would read for a conversation.

The prompt is rendered exactly as ``text/complete`` renders it (the tokenizer's own chat
template, with ``tools=``) and counted with the model's tokenizer, never cut to the model card's
cache: the count of the whole prompt. Only the tokenizer loads (no weights, no device), kept per
folder until its files change. Hidden: the host runs it for ``/anthropic``'s ``count_tokens``,
finding it by its shape (the chat params and an ``input_tokens`` output).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Annotated, Any

from inline_sdk import Context, Output, Param, node

from ._complete import build_messages, normalize_tools, render_prompt
from ._load import find_model

#: Tokenizers kept at most (one per folder in use).
KEEP = 4
#: The files a tokenizer and its chat template are read from (by suffix), not the weights.
TOKENIZER_FILES = frozenset({".json", ".jinja", ".model", ".txt", ".tiktoken"})


@node(
    "text/count-tokens",
    title="Count tokens (LLM)",
    category="Text",
    icon="hash",
    output_kind="text",
    hidden=True,
    concurrency=4,
)
class CountTokens:
    """The input tokens of a conversation for a causal LM, counted with its tokenizer."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tokenizers: dict[Path, tuple[tuple[int, ...], Any]] = {}

    def run(
        self,
        ctx: Context,
        *,
        model: Annotated[
            str, Param("Model", widget="select", options_from="llm", architecture="causal")
        ] = "",
        system: Annotated[str, Param("System prompt", widget="textarea")] = "",
        messages: Annotated[list[dict[str, Any]], Param("Messages", internal=True)] = [],  # noqa: B006
        tools: Annotated[list[dict[str, Any]], Param("Tools", internal=True)] = [],  # noqa: B006
    ) -> Annotated[str, Output("input_tokens", "Input tokens")]:
        conversation = build_messages(messages, system, None)
        specs = normalize_tools(tools)
        tokenizer = self._tokenizer(find_model(ctx.models_dir, model, "causal"))
        text = render_prompt(tokenizer, conversation, specs)
        return str(len(tokenizer(text, add_special_tokens=False)["input_ids"]))

    def _tokenizer(self, folder: Path) -> Any:
        """The tokenizer of ``folder``, loaded again when its files changed."""
        stamp = tuple(
            p.stat().st_mtime_ns for p in sorted(folder.iterdir()) if p.suffix in TOKENIZER_FILES
        )
        with self._lock:
            held = self._tokenizers.get(folder)
            if held is not None and held[0] == stamp:
                return held[1]
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        with self._lock:
            self._tokenizers[folder] = (stamp, tokenizer)
            while len(self._tokenizers) > KEEP:
                self._tokenizers.pop(next(iter(self._tokenizers)))
        return tokenizer
