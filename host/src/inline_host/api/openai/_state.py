"""Objects the /openai routes share, one per app, kept in the app's state."""

from __future__ import annotations

from typing import TypeVar

from litestar.datastructures import State

T = TypeVar("T")


def app_object(state: State, key: str, kind: type[T]) -> T:
    """The app's ``kind`` under ``key`` in its state, made on first use."""
    found = state.get(key)
    if not isinstance(found, kind):
        found = kind()
        state[key] = found
    return found
