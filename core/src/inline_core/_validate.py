"""Semantic checks of a parsed graph against the node catalog (contract 1.3, stage B), plus ours.

Every problem is reported at once. The reference stops at its first failure; to keep the
contract's single-error envelope identical, the issues the reference checks come first, in its
order (B1 target, B2 unknown types, B3-B8 node by node, B9 cycle), followed by the checks the
reference does not make (params against their schema, engine handles crossing packs), node by
node in document order. Checks that would only repeat an earlier problem are skipped: a node of
an unknown type gets no port checks, an edge from a missing node no kind check.
"""

from __future__ import annotations

from collections.abc import Iterator

from inline_sdk import HANDLE_KINDS, is_list_kind, port_satisfies

from . import _paths
from ._catalog import ListingCatalog, NodeCatalog, NodeEntry
from ._errors import GraphInvalid, Issue
from ._graph import Graph, GraphNode
from ._schema import check_params, check_steps
from ._suggest import did_you_mean

__all__ = ("find_cycle", "validate")

_CODE = GraphInvalid.code


def validate(graph: Graph, target: str, catalog: NodeCatalog) -> None:
    """Check ``graph`` for a run of ``target``; raise ``GraphInvalid`` with every issue found."""
    entries = {n.id: catalog.lookup(n.type) for n in graph.nodes}
    issues: list[Issue] = []
    extra: list[Issue] = []
    if graph.node(target) is None:
        issues.append(_issue(f"No node with id {target!r}.", target, _paths.TARGET))
    unknown = [n for n in graph.nodes if entries[n.id] is None]
    if unknown:  # the catalog is listed (a Protocol check, not cheap) only to word suggestions
        known = list(catalog.node_types()) if isinstance(catalog, ListingCatalog) else []
        for n in unknown:
            message = f"Unknown node type {n.type!r}.{did_you_mean(n.type, known)}"
            issues.append(_issue(message, n.id, f"{_paths.node(n.index)}.type"))
    for n in graph.nodes:
        entry = entries[n.id]
        if entry is None:
            continue
        issues += _check_inputs(graph, n, entry, entries, extra)
    if graph.node(target) is not None and (cycle := find_cycle(graph, target)):
        first = min(cycle, key=lambda c: c.index)
        issues.append(_issue("This graph has a cycle.", None, _paths.node(first.index)))
    issues += extra
    if issues:
        raise GraphInvalid(issues)


def find_cycle(graph: Graph, target: str) -> list[GraphNode]:
    """The nodes of one cycle in ``target``'s upstream closure, in edge order (empty when none)."""
    start = graph.node(target)
    if start is None:
        return []
    done: set[str] = set()
    path: list[GraphNode] = [start]
    on_path: set[str] = {start.id}
    stack: list[Iterator[GraphNode]] = [_upstream(graph, start)]
    while stack:
        upstream = next(stack[-1], None)
        if upstream is None:
            finished = path.pop()
            on_path.discard(finished.id)
            done.add(finished.id)
            stack.pop()
        elif upstream.id in on_path:
            return path[path.index(upstream) :]
        elif upstream.id not in done:
            path.append(upstream)
            on_path.add(upstream.id)
            stack.append(_upstream(graph, upstream))
    return []


def _upstream(graph: Graph, node: GraphNode) -> Iterator[GraphNode]:
    for edges in node.inputs.values():
        for edge in edges:
            source = graph.node(edge.source)
            if source is not None:
                yield source


def _check_inputs(
    graph: Graph,
    node: GraphNode,
    entry: NodeEntry,
    entries: dict[str, NodeEntry | None],
    extra: list[Issue],
) -> list[Issue]:
    """B3-B8 for one node; params and cross-pack handle issues go to ``extra``."""
    issues: list[Issue] = []
    descriptor = entry.descriptor
    inputs_path = f"{_paths.node(node.index)}.inputs"
    params_path = f"{_paths.node(node.index)}.params"
    extra += check_params(
        descriptor.params_schema, node.params, node_id=node.id, base_path=params_path
    )
    extra += check_steps(descriptor.params, node.params, node_id=node.id, base_path=params_path)
    for port in descriptor.inputs:
        # An empty edge list passes the reference's B3 and fails at run time; refuse it here.
        if port.required and not node.inputs.get(port.id):
            message = f"{descriptor.title} needs an input wired to {port.label!r}."
            issues.append(_issue(message, node.id, _paths.child(inputs_path, port.id)))
    for port_id, edges in node.inputs.items():
        spec = descriptor.input(port_id)
        if spec is None:
            message = f"{node.type!r} has no input port {port_id!r}."
            issues.append(_issue(message, node.id, _paths.child(inputs_path, port_id)))
            continue
        if len(edges) > 1 and not is_list_kind(spec.kind):
            message = f"Input {port_id!r} takes a single edge."
            issues.append(_issue(message, node.id, _paths.child(inputs_path, port_id)))
        for position, edge in enumerate(edges):
            path = _paths.edge(node.index, port_id, position, len(edges))
            source = graph.node(edge.source)
            if source is None:
                message = f"No node with id {edge.source!r}."
                issues.append(_issue(message, edge.source, f"{path}.from"))
                continue
            source_entry = entries.get(source.id)
            if source_entry is None:
                continue  # reported as an unknown type
            output = source_entry.descriptor.output(edge.output)
            if output is None:
                message = f"{source.type!r} has no output port {edge.output!r}."
                issues.append(_issue(message, node.id, f"{path}.output"))
                continue
            if not port_satisfies(output.kind, spec.kind):
                message = f"Cannot wire {output.kind} into {spec.kind} at {node.id}.{port_id}."
                issues.append(_issue(message, node.id, path))
                continue
            # A portable output (a loader's file reference) is plain data: any pack may read it.
            crosses = source_entry.pack != entry.pack and not output.portable
            if output.kind in HANDLE_KINDS and crosses:
                message = (
                    f"Cannot pass a {output.kind} handle from pack {source_entry.pack!r} "
                    f"(node {source.id!r}) to pack {entry.pack!r} (node {node.id!r}): "
                    "engine handles stay in the pack that made them."
                )
                extra.append(_issue(message, node.id, path))
    return issues


def _issue(message: str, node_id: str | None, path: str) -> Issue:
    return Issue(code=_CODE, message=message, node_id=node_id, path=path)
