"""The model card (``inline.json``) and the seed's sizing rules (no torch here).

A model folder ``models/llm/<name>/`` may carry ``inline.json``: ``{"max_total_tokens": 4096,
"compile": false}``. The KV cache is sized once per model: ``max_total_tokens``, never past the
model's ``max_position_embeddings`` (static when ``generate`` compiles, see ``_generate``). A
reply takes at most half of it; a prompt that does not fit in the rest is cut, keeping its end. Rewrites pad their input to a bucket so that a
compiled decoder captures once per bucket.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

DEFAULT_TOTAL: Final = 4096
BUCKETS: Final = (32, 64, 128, 256, 512)
REWRITE_MAX: Final = 512


class CardInvalid(ValueError):
    """An ``inline.json`` that is not a model card."""


@dataclass(frozen=True, slots=True)
class ModelCard:
    max_total_tokens: int = DEFAULT_TOTAL
    compile: bool = False


def read_card(folder: Path) -> ModelCard:
    """The folder's ``inline.json`` (defaults when there is none); raises ``CardInvalid``."""
    path = folder / "inline.json"
    if not path.is_file():
        return ModelCard()
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CardInvalid(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise CardInvalid(f"{path}: expected an object, got {type(data).__name__}")
    total = data.get("max_total_tokens", DEFAULT_TOTAL)
    if not isinstance(total, int) or isinstance(total, bool) or total < 2:
        raise CardInvalid(f"{path}: $.max_total_tokens must be a whole number >= 2, got {total!r}")
    compile_ = data.get("compile", False)
    if not isinstance(compile_, bool):
        raise CardInvalid(f"{path}: $.compile must be true or false, got {compile_!r}")
    return ModelCard(max_total_tokens=total, compile=compile_)


@dataclass(frozen=True, slots=True)
class Budget:
    """How one completion fits the cache."""

    total: int  # the cache's length
    reply: int  # tokens the reply may take
    prompt: int  # tokens of the prompt kept
    warning: str | None  # set when the prompt was cut


def cache_length(card: ModelCard, max_positions: int | None) -> int:
    """The cache's length: the card's, never past the model's positions."""
    if max_positions is None or max_positions <= 0:
        return card.max_total_tokens
    return min(card.max_total_tokens, max_positions)


def budget(total: int, prompt_tokens: int, max_new_tokens: int) -> Budget:
    """The reply takes at most half of ``total``; the prompt gets the rest (its end kept)."""
    reply = max(1, min(max_new_tokens, total // 2))
    room = total - reply
    if prompt_tokens <= room:
        return Budget(total, reply, prompt_tokens, None)
    warning = (
        f"The prompt has {prompt_tokens} tokens but only {room} fit (cache {total} tokens, "
        f"{reply} kept for the reply): its first {prompt_tokens - room} tokens were dropped"
    )
    return Budget(total, reply, room, warning)


@dataclass(frozen=True, slots=True)
class Bucket:
    """How one rewrite input is padded."""

    length: int  # padded length
    kept: int  # input tokens kept
    warning: str | None  # set when the input was cut


def bucket(tokens: int) -> Bucket:
    """The next bucket of 32, 64, 128, 256 or 512 tokens; a longer input is cut to 512."""
    if tokens > REWRITE_MAX:
        warning = (
            f"The text has {tokens} tokens but at most {REWRITE_MAX} fit: it was cut to its "
            f"first {REWRITE_MAX} tokens"
        )
        return Bucket(REWRITE_MAX, REWRITE_MAX, warning)
    size = next(b for b in BUCKETS if b >= tokens)
    return Bucket(size, tokens, None)
