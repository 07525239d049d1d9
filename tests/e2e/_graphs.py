"""Small builders for run requests in tests."""

from __future__ import annotations

import struct
from typing import Any


def n(
    node_id: str,
    node_type: str,
    params: dict[str, Any] | None = None,
    **inputs: tuple[str, str] | list[tuple[str, str]],
) -> dict[str, Any]:
    """A graph node; each input is (source id, output port) or a list of them."""
    wired: dict[str, Any] = {}
    for port, edge in inputs.items():
        edges = edge if isinstance(edge, list) else [edge]
        wired[port] = [{"from": src, "output": out} for src, out in edges]
    node: dict[str, Any] = {"id": node_id, "type": node_type, "params": params or {}}
    if wired:
        node["inputs"] = wired
    return node


def request(target: str, *nodes: dict[str, Any]) -> dict[str, Any]:
    """A run request."""
    return {"graph": {"schemaVersion": 1, "nodes": list(nodes)}, "target": target}


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])
