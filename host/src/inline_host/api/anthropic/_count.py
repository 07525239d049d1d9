"""Which node counts a chat model's input tokens, found by what the descriptors declare.

A counting node takes the chat params ``model``, ``system``, ``messages`` and ``tools``, and
answers the count as the decimal text of its ``input_tokens`` output (``text/count-tokens`` of
the text pack renders the prompt exactly as ``text/complete`` does, with the model's own
tokenizer and chat template, and loads no weights). It counts for a local chat node when its
``model`` picks the same ``llm`` folders (the same architecture). A hosted model has none: no
hosted node counts through its provider.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from inline_sdk import Descriptor

from ...models import CATEGORY

#: The output of a counting node.
COUNT_OUTPUT: Final = "input_tokens"
#: The params a counting node declares.
COUNT_PARAMS: Final = ("model", "system", "messages", "tools")


def _llm_architecture(d: Descriptor) -> tuple[bool, str | None]:
    """Whether ``d``'s ``model`` picks ``llm`` folders, and of which architecture."""
    model = d.param("model")
    return model is not None and model.options_from == CATEGORY, d.architecture("model")


def counting_node(descriptors: Sequence[Descriptor], chat_node: str) -> str | None:
    """The node that counts the input tokens of ``chat_node``'s models (None: none does)."""
    chat = next((d for d in descriptors if d.type == chat_node), None)
    if chat is None:
        return None
    local, arch = _llm_architecture(chat)
    if not local:
        return None
    for d in descriptors:
        port = d.output(COUNT_OUTPUT)
        properties = d.params_schema.get("properties")
        if port is None or port.kind != "text" or not isinstance(properties, dict):
            continue
        if all(k in properties for k in COUNT_PARAMS) and _llm_architecture(d) == (True, arch):
            return d.type
    return None


def read_count(text: str | None) -> int | None:
    """The count a counting node answered (None: not a count)."""
    try:
        count = int((text or "").strip())
    except ValueError:
        return None
    return count if count >= 0 else None
