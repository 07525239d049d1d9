"""Relative ``{"ref": "path", "path": ...}`` values of a run request, resolved against the input
roots (``INLINE_INPUT_ROOTS``; by default the server's working directory, ``<data dir>/inputs``
and the home folder), then ``examples/`` of the server's working directory, in that order: the
first holding the file wins, so an ``examples/`` graph (whose paths are relative to its own
folder, as ``inline run`` reads them) means the same file over HTTP. A relative path none holds
is a 422 naming the node, the JSON path and every place looked; an absolute path is left to the
input checks (``guard.InputPaths``), which also keep every resolved path inside the roots."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from inline_core import GraphInvalid, Issue

#: How deep params are searched (deeper nesting is refused by the graph checks).
MAX_DEPTH = 32


def _refs(value: Any, where: str, depth: int = 0) -> Iterator[tuple[str, dict[str, Any]]]:
    if depth > MAX_DEPTH:
        return
    if isinstance(value, dict):
        if value.get("ref") == "path":
            yield where, value
            return
        for k, v in value.items():
            yield from _refs(v, f"{where}.{k}", depth + 1)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _refs(v, f"{where}[{i}]", depth + 1)


def ref_roots(input_roots: Sequence[Path], cwd: Path) -> tuple[Path, ...]:
    """Where a relative path reference is looked for, in order."""
    return tuple(dict.fromkeys((*input_roots, cwd / "examples")))  # in order, once each


def resolve_path_refs(request: Any, roots: Sequence[Path]) -> Any:
    """``request`` with each relative path reference made absolute against the first of
    ``roots`` that holds it (a copy; the request itself when it names none); ``GraphInvalid``
    listing every reference no root holds, with where each was looked for."""
    graph = request.get("graph") if isinstance(request, dict) else None
    nodes = graph.get("nodes") if isinstance(graph, dict) else None
    if not isinstance(nodes, list) or not any(_relative(nodes)):
        return request
    out = copy.deepcopy(request)
    issues: list[Issue] = []
    for node_id, where, ref in _relative(out["graph"]["nodes"]):
        raw = ref["path"]
        found = next((root / raw for root in roots if (root / raw).is_file()), None)
        if found is not None:
            ref["path"] = str(found)
            continue
        looked = ", ".join(str(root / raw) for root in roots) or "(no input roots)"
        issues.append(Issue(
            code="invalid_input", node_id=node_id, path=where,
            message=f"Node '{node_id}': input '{raw}' was not found: a relative path is looked "
            f"for in the input roots (INLINE_INPUT_ROOTS), then in examples/; looked at {looked}",
        ))  # fmt: skip
    if issues:
        raise GraphInvalid(issues)
    return out


def _relative(nodes: list[Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """Each relative path reference of ``nodes``: its node's id, JSON path and the reference."""
    for i, node in enumerate(nodes):
        if not isinstance(node, dict) or not isinstance(node.get("params"), dict):
            continue
        for where, ref in _refs(node["params"], f"$.graph.nodes[{i}].params"):
            raw = ref.get("path")
            if isinstance(raw, str) and raw and "\x00" not in raw and not Path(raw).is_absolute():
                yield str(node.get("id", i)), where, ref  # the input checks refuse the rest
