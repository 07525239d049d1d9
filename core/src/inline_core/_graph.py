"""The graph document (contract 1.1) as frozen values, and its shape checks (contract 1.3, A).

``parse_graph`` reports every shape problem it can find in one pass, each with the reference's
exact message, its JSON path under ``$.graph`` and, where the contract names one, the node id.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import _paths
from ._errors import GraphInvalid, Issue, RequestInvalid

__all__ = ("Edge", "Graph", "GraphNode", "parse_graph", "parse_request")

_CODE = GraphInvalid.code


@dataclass(frozen=True, slots=True)
class Edge:
    """An edge into a node's input port: output ``output`` of node ``source``."""

    source: str
    output: str


@dataclass(frozen=True, slots=True)
class GraphNode:
    """One node of a parsed graph. ``index`` is its position in the document's ``nodes``."""

    id: str
    type: str
    params: dict[str, Any]
    inputs: dict[str, tuple[Edge, ...]]
    index: int


@dataclass(frozen=True, slots=True)
class Graph:
    """A parsed graph: its nodes in document order, with lookup by id."""

    nodes: tuple[GraphNode, ...]
    _by_id: dict[str, GraphNode] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_id: dict[str, GraphNode] = {}
        for n in self.nodes:
            by_id.setdefault(n.id, n)
        object.__setattr__(self, "_by_id", by_id)

    def node(self, node_id: str) -> GraphNode | None:
        """The node with id ``node_id``, if there is one."""
        return self._by_id.get(node_id)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._by_id


_ENVELOPE_HINT = (
    "This is a bare graph: a run request wraps it as "
    '{"graph": {"schemaVersion": 1, "nodes": [...]}, "target": "<node id>"}, '
    "where target is the node whose outputs you want."
)


def parse_request(doc: Any) -> tuple[Graph, str]:
    """Parse a run request ``{"graph": ..., "target": ...}`` in the contract's order (4.1).

    Raises ``RequestInvalid`` when the request is not an object or ``target`` is not a string,
    then ``GraphInvalid`` for the graph's shape.
    """
    if not isinstance(doc, dict):
        raise RequestInvalid.of("The request body must be a JSON object.", "$")
    if "graph" not in doc and ("nodes" in doc or "schemaVersion" in doc):
        raise RequestInvalid.of(_ENVELOPE_HINT, "$")
    target = doc.get("target")
    if not isinstance(target, str):
        raise RequestInvalid.of("'target' is required.", _paths.TARGET)
    return parse_graph(doc.get("graph")), target


def parse_graph(doc: Any) -> Graph:
    """Check a graph document's shape and build the ``Graph``; raise ``GraphInvalid`` with every
    problem found (contract 1.3, stage A)."""
    if not isinstance(doc, dict):
        raise GraphInvalid([_issue("Graph must be an object.", None, _paths.GRAPH)])
    issues: list[Issue] = []
    version = doc.get("schemaVersion")
    if isinstance(version, bool) or version != 1:
        issues.append(
            _issue(
                f"Unsupported graph schemaVersion: {version!r}.",
                None,
                f"{_paths.GRAPH}.schemaVersion",
            )
        )
    raw_nodes = doc.get("nodes")
    if not isinstance(raw_nodes, list):
        issues.append(_issue("Graph 'nodes' must be a list.", None, f"{_paths.GRAPH}.nodes"))
        raise GraphInvalid(issues)

    nodes: list[GraphNode] = []
    for index, raw in enumerate(raw_nodes):
        parsed = _parse_node(index, raw, issues)
        if parsed is not None:
            nodes.append(parsed)

    issues.extend(_duplicates(raw_nodes))
    if issues:
        raise GraphInvalid(issues)
    return Graph(tuple(nodes))


def _issue(message: str, node_id: str | None, path: str) -> Issue:
    return Issue(code=_CODE, message=message, node_id=node_id, path=path)


def _parse_node(index: int, raw: Any, issues: list[Issue]) -> GraphNode | None:
    path = _paths.node(index)
    if not isinstance(raw, dict):
        issues.append(_issue("Each node must be an object.", None, path))
        return None
    node_id, node_type = raw.get("id"), raw.get("type")
    shaped = isinstance(node_id, str) and isinstance(node_type, str)
    if not shaped:
        bad = "id" if not isinstance(node_id, str) else "type"
        issues.append(_issue("Each node needs a string 'id' and 'type'.", None, f"{path}.{bad}"))
    # The contract ties A6/A7 to the node's id; a node without one is still checked.
    known_id = node_id if isinstance(node_id, str) else None

    params: dict[str, Any] = {}
    raw_params = raw.get("params")
    if isinstance(raw_params, dict):
        params = dict(raw_params)
    elif raw_params:
        issues.append(_issue("Node 'params' must be an object.", known_id, f"{path}.params"))
        shaped = False

    inputs: dict[str, tuple[Edge, ...]] = {}
    raw_inputs = raw.get("inputs")
    if raw_inputs is None:
        pass
    elif not isinstance(raw_inputs, dict):
        issues.append(_issue("Node 'inputs' must be an object.", known_id, f"{path}.inputs"))
        shaped = False
    else:
        for port, value in raw_inputs.items():
            edges = _parse_edges(index, str(port), value, issues)
            if edges is None:
                shaped = False
            else:
                inputs[str(port)] = edges

    if not shaped:
        return None
    assert isinstance(node_id, str) and isinstance(node_type, str)
    return GraphNode(id=node_id, type=node_type, params=params, inputs=inputs, index=index)


def _parse_edges(index: int, port: str, value: Any, issues: list[Issue]) -> tuple[Edge, ...] | None:
    port_path = _paths.child(f"{_paths.node(index)}.inputs", port)
    listed = isinstance(value, list)
    raw_edges: list[Any] = value if isinstance(value, list) else [value]
    edges: list[Edge] = []
    ok = True
    for position, raw in enumerate(raw_edges):
        path = _paths.item(port_path, position) if listed else port_path
        if not isinstance(raw, dict):
            issues.append(
                _issue("An input edge must be an object with 'from' and 'output'.", None, path)
            )
            ok = False
            continue
        source, output = raw.get("from"), raw.get("output")
        if not isinstance(source, str) or not isinstance(output, str):
            bad = "from" if not isinstance(source, str) else "output"
            issues.append(
                _issue("An input edge needs string 'from' and 'output'.", None, f"{path}.{bad}")
            )
            ok = False
            continue
        edges.append(Edge(source=source, output=output))
    return tuple(edges) if ok else None


def _duplicates(raw_nodes: list[Any]) -> list[Issue]:
    seen: set[str] = set()
    duplicated: set[str] = set()
    first_repeat: int | None = None
    for index, raw in enumerate(raw_nodes):
        node_id = raw.get("id") if isinstance(raw, dict) else None
        if not isinstance(node_id, str):
            continue
        if node_id in seen:
            duplicated.add(node_id)
            if first_repeat is None:
                first_repeat = index
        seen.add(node_id)
    if first_repeat is None:
        return []
    message = f"Duplicate node ids: {sorted(duplicated)!r}."
    return [_issue(message, None, f"{_paths.node(first_repeat)}.id")]
