"""JSON paths in issues: ``$.graph.nodes[3].params.width``, ``$.graph.nodes[0]['odd key']``."""

from __future__ import annotations

import re
from typing import Final

_IDENTIFIER: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

GRAPH: Final = "$.graph"
TARGET: Final = "$.target"


def child(base: str, key: str) -> str:
    """The path of ``key`` inside the object at ``base``."""
    if _IDENTIFIER.match(key):
        return f"{base}.{key}"
    return f"{base}[{key!r}]"


def item(base: str, index: int) -> str:
    """The path of element ``index`` of the array at ``base``."""
    return f"{base}[{index}]"


def node(index: int) -> str:
    """The path of the node at ``index`` in the graph's ``nodes`` array."""
    return f"{GRAPH}.nodes[{index}]"


def edge(index: int, port: str, position: int, count: int) -> str:
    """The path of one edge on ``port``: the port itself when it has one edge."""
    base = child(f"{node(index)}.inputs", port)
    return base if count == 1 else item(base, position)
