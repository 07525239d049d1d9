"""Planning a run: the target's upstream closure in topological order, with resolved params and
a content-addressed cache key per node.

A node's key is a Merkle hash: SHA-256 over a canonical JSON encoding (sorted keys) of its type,
its descriptor version, its pack's version, its resolved params (declared defaults overlaid with
the node's params, random seeds already drawn), the host's fingerprint of files it references,
and, per input port, the ``[output port, upstream key]`` pairs in edge order. Node ids never
enter it, so the same computation gets the same key in any graph, process or restart.
"""

from __future__ import annotations

import copy
import hashlib
import heapq
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec
from inline_sdk import Descriptor

from ._catalog import NodeCatalog
from ._graph import Edge, Graph, GraphNode
from ._validate import validate

__all__ = ("Plan", "PlannedNode", "compute_key", "plan", "resolve_params")

#: Bumped whenever what goes into a key changes, so old stored keys stop matching.
KEY_FORMAT: Final = 1
SEED_WIDGET: Final = "seed"
SEED_LIMIT: Final = 2**32

Fingerprint = Callable[[GraphNode], str | None]


@dataclass(frozen=True, slots=True)
class PlannedNode:
    """A node ready to run: resolved params, its cache key and the ids it waits for."""

    id: str
    type: str
    pack: str
    params: dict[str, Any]
    inputs: dict[str, tuple[Edge, ...]]
    key: str
    deps: tuple[str, ...]
    descriptor: Descriptor


@dataclass(frozen=True)
class Plan:
    """The nodes a run executes (the target's upstream closure), in topological order."""

    target: str
    nodes: tuple[PlannedNode, ...]
    _by_id: dict[str, PlannedNode] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_id", {n.id: n for n in self.nodes})

    def node(self, node_id: str) -> PlannedNode:
        """The planned node ``node_id``; ``KeyError`` when it is not part of this plan."""
        return self._by_id[node_id]

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._by_id


def plan(
    graph: Graph,
    target: str,
    catalog: NodeCatalog,
    *,
    fingerprint: Fingerprint | None = None,
    rng: random.Random | None = None,
) -> Plan:
    """Validate ``graph`` (raising ``GraphInvalid``) and plan a run of ``target``.

    ``fingerprint(node)`` lets the host fold what a node reads from outside the graph (the
    content hash of a ``{"ref": "path"}`` file) into its key. Seeds below zero are drawn from
    ``rng`` (system randomness by default).
    """
    validate(graph, target, catalog)
    draw = rng if rng is not None else random.SystemRandom()
    keys: dict[str, str] = {}
    planned: list[PlannedNode] = []
    for node in _closure_order(graph, target):
        entry = catalog.lookup(node.type)
        if entry is None:  # validate() refused this already; a catalog that changed under us
            raise LookupError(f"node type {node.type!r} vanished from the catalog")
        params = resolve_params(entry.descriptor, node.params, draw)
        inputs = {port: tuple(edges) for port, edges in node.inputs.items()}
        key = compute_key(
            node_type=node.type,
            version=entry.descriptor.version,
            pack_version=entry.pack_version,
            params=params,
            fingerprint=fingerprint(node) if fingerprint is not None else None,
            inputs={
                port: [(edge.output, keys[edge.source]) for edge in edges]
                for port, edges in inputs.items()
            },
        )
        keys[node.id] = key
        deps = tuple(dict.fromkeys(e.source for edges in inputs.values() for e in edges))
        planned.append(
            PlannedNode(
                id=node.id,
                type=node.type,
                pack=entry.pack,
                params=params,
                inputs=inputs,
                key=key,
                deps=deps,
                descriptor=entry.descriptor,
            )
        )
    return Plan(target=target, nodes=tuple(planned))


def resolve_params(
    descriptor: Descriptor, params: Mapping[str, Any], rng: random.Random
) -> dict[str, Any]:
    """Declared defaults overlaid with ``params``; every negative seed-widget value replaced by a
    seed drawn from ``rng`` (the seed actually used)."""
    properties = descriptor.params_schema.get("properties", {})
    resolved: dict[str, Any] = {
        name: copy.deepcopy(prop["default"])
        for name, prop in properties.items()
        if isinstance(prop, dict) and "default" in prop
    }
    resolved.update(copy.deepcopy(dict(params)))
    for param in descriptor.params:
        value = resolved.get(param.key)
        if (
            param.widget == SEED_WIDGET
            and isinstance(value, int)
            and not isinstance(value, bool)
            and value < 0
        ):
            resolved[param.key] = rng.randrange(SEED_LIMIT)
    return resolved


def compute_key(
    *,
    node_type: str,
    version: str,
    pack_version: str,
    params: Mapping[str, Any],
    fingerprint: str | None,
    inputs: Mapping[str, Sequence[tuple[str, str]]],
) -> str:
    """The cache key of one node, given its upstream keys (hex SHA-256)."""
    document = {
        "format": KEY_FORMAT,
        "type": node_type,
        "version": version,
        "packVersion": pack_version,
        "params": dict(params),
        "fingerprint": fingerprint,
        "inputs": {port: [list(pair) for pair in pairs] for port, pairs in inputs.items()},
    }
    encoded = msgspec.json.encode(document, order="sorted")
    return hashlib.sha256(encoded).hexdigest()


def _closure_order(graph: Graph, target: str) -> list[GraphNode]:
    """The target's upstream closure, topologically sorted; ties broken by document order."""
    start = graph.node(target)
    if start is None:
        return []
    closure: dict[str, GraphNode] = {start.id: start}
    pending = [start]
    while pending:
        for source in _sources(graph, pending.pop()):
            if source.id not in closure:
                closure[source.id] = source
                pending.append(source)
    waiting = {n.id: len({s.id for s in _sources(graph, n)}) for n in closure.values()}
    dependants: dict[str, list[GraphNode]] = {node_id: [] for node_id in closure}
    for n in closure.values():
        for source_id in {s.id for s in _sources(graph, n)}:
            dependants[source_id].append(n)
    ready = [(n.index, n.id) for n in closure.values() if waiting[n.id] == 0]
    heapq.heapify(ready)
    order: list[GraphNode] = []
    while ready:
        _, node_id = heapq.heappop(ready)
        order.append(closure[node_id])
        for dependant in dependants[node_id]:
            waiting[dependant.id] -= 1
            if waiting[dependant.id] == 0:
                heapq.heappush(ready, (dependant.index, dependant.id))
    if len(order) != len(closure):  # validate() refuses cycles; only a bypass gets here
        raise ValueError("This graph has a cycle.")
    return order


def _sources(graph: Graph, node: GraphNode) -> list[GraphNode]:
    return [
        source
        for edges in node.inputs.values()
        for edge in edges
        if (source := graph.node(edge.source)) is not None
    ]
