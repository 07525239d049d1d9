"""Suggestions for misspelled names: ``did you mean 'width'?``."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ("closest", "did_you_mean")


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate ``word`` most likely misspells (case-insensitive), or ``None``."""
    names = list(dict.fromkeys(candidates))
    folded = {name.casefold(): name for name in names}
    if word.casefold() in folded:
        return folded[word.casefold()]
    found = difflib.get_close_matches(word.casefold(), list(folded), n=1, cutoff=0.6)
    return folded[found[0]] if found else None


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """`` Did you mean 'x'?`` for the closest candidate, or the empty string when none is close."""
    match = closest(word, candidates)
    return f" Did you mean {match!r}?" if match is not None else ""
