"""A UI save to a prompt, as ComfyUI's frontend does it (``graphToPrompt``).

Primitive nodes push their values into the widgets they feed; reroutes collapse; a bypassed node
(mode 4) passes its input of the matching type through; a muted node (mode 2) is dropped; subgraph
instances are flattened (inner ids become ``<instance>:<inner>``); widget values map to input names
in order, skipping ``control_after_generate``. A link claimed by two inputs, a link missing from
the table and duplicate links are reported as warnings, never a crash.

Subgraphs multiply: a definition instancing the next one twice, 30 deep, is 2^30 nodes in a few
KB. So before anything is built the expansion is counted (instances times their contents, each
definition once per depth) and refused past ``MAX_NODES`` / ``MAX_VALUES``; a definition's nodes
and links are read once however often it is instanced; the walk checks its ``Budget`` as it goes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ._errors import MAX_NODES, MAX_VALUES, Budget, TooManyNodes
from ._prompt import Dropped, Prompt, PromptNode, Ref
from ._widgets import CONTROL, VIRTUAL, is_control_value, widget_names

MUTED: Final = 2
BYPASSED: Final = 4
SUBGRAPH_INPUT: Final = -10
SUBGRAPH_OUTPUT: Final = -20
#: Subgraphs nested deeper than this are not flattened (a warning says so).
MAX_DEPTH: Final = 32
#: Widgets of the frontend only (an upload button), never an input of the node.
UI_ONLY_WIDGETS: Final = frozenset({CONTROL, "upload"})


@dataclass(frozen=True, slots=True)
class _Link:
    origin: Any
    origin_slot: int
    target: Any
    target_slot: int


@dataclass(frozen=True, slots=True)
class _Value:
    value: Any


@dataclass(frozen=True, slots=True)
class _Level:
    """One graph as written (the top, or a subgraph definition): its nodes and links by id,
    read once however many instances it has."""

    nodes: dict[str, dict[str, Any]]
    links: dict[int, _Link]


@dataclass(eq=False)
class _Scope:
    """One graph level: the top, or one subgraph instance (its nodes, links, where it sits)."""

    prefix: str
    nodes: dict[str, dict[str, Any]]
    links: dict[int, _Link]
    definition: dict[str, Any] | None = None
    parent: _Scope | None = None
    instance: dict[str, Any] | None = None
    #: The scopes of this level's subgraph instances, by node id (built once each).
    children: dict[str, _Scope] = field(default_factory=dict)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _key(node_id: Any) -> str:
    return str(node_id)


def _nodes(graph: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {_key(n["id"]): n for n in graph.get("nodes", []) if isinstance(n, dict) and "id" in n}


def _count(value: Any) -> int:
    return len(value) if isinstance(value, list | dict) else 0


def _parse_links(raw: Any, where: str, warnings: list[str]) -> dict[int, _Link]:
    links: dict[int, _Link] = {}
    for item in raw if isinstance(raw, list) else []:
        if isinstance(item, dict):
            parts = [
                item.get(k) for k in ("id", "origin_id", "origin_slot", "target_id", "target_slot")
            ]
        elif isinstance(item, list) and len(item) >= 5:
            parts = item[:5]
        else:
            warnings.append(
                f"{where}: a link entry {item!r} is not [id, origin, slot, target, slot]; ignored"
            )
            continue
        lid, origin, oslot, target, tslot = parts
        if not isinstance(lid, int) or not isinstance(oslot, int) or not isinstance(tslot, int):
            warnings.append(f"{where}: link {lid!r} is malformed; ignored")
            continue
        link = _Link(origin, oslot, target, tslot)
        old = links.get(lid)
        if old is not None and old != link:
            warnings.append(
                f"{where}: link {lid} appears twice with different ends; the first is used"
            )
            continue
        if old is not None:
            warnings.append(f"{where}: link {lid} appears twice; the duplicate is ignored")
        links.setdefault(lid, link)
    return links


class Flattener:
    """Turns one UI save into a ``Prompt``."""

    def __init__(
        self,
        data: dict[str, Any],
        widgets: Mapping[str, tuple[str, ...]] | None = None,
        budget: Budget | None = None,
    ) -> None:
        self.data = data
        self.widgets = widgets or {}
        self.budget = budget or Budget.start("input")
        self.prompt = Prompt()
        defs = data.get("definitions")
        subgraphs = _list(defs.get("subgraphs")) if isinstance(defs, dict) else []
        self.subgraphs: dict[str, dict[str, Any]] = {
            sg["id"]: sg
            for sg in subgraphs
            if isinstance(sg, dict) and isinstance(sg.get("id"), str)
        }
        self._warned: set[str] = set()
        self._levels: dict[int, _Level] = {}

    def warn(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            self.prompt.warnings.append(message)

    def run(self) -> Prompt:
        """The prompt; ``TooManyNodes`` (before anything is built) past the caps."""
        nodes, values = self._expansion(self.data, 0, {})
        where = self.budget.where
        if nodes > MAX_NODES:
            raise TooManyNodes(where, "nodes", nodes, MAX_NODES)
        if values > MAX_VALUES:
            raise TooManyNodes(where, "inputs and widget values", values, MAX_VALUES)
        top = self._scope(self.data, "", None, None, None)
        self._emit(top, depth=0)
        return self.prompt

    def _expansion(
        self, graph: dict[str, Any], depth: int, memo: dict[tuple[str, int], tuple[int, int]]
    ) -> tuple[int, int]:
        """How many nodes (instances included), and inputs and widget values, ``graph`` expands
        to as ``_emit`` walks it; each definition is counted once per depth."""
        if depth > MAX_DEPTH:
            return 0, 0
        self.budget.check()
        count = values = 0
        for nid, node in _nodes(graph).items():
            if nid in (str(SUBGRAPH_INPUT), str(SUBGRAPH_OUTPUT)):
                continue
            count += 1
            values += _count(node.get("inputs")) + _count(node.get("widgets_values"))
            ntype = str(node.get("type"))
            if ntype in self.subgraphs and node.get("mode", 0) not in (MUTED, BYPASSED):
                key = (ntype, depth + 1)
                if key not in memo:
                    memo[key] = self._expansion(self.subgraphs[ntype], depth + 1, memo)
                count, values = count + memo[key][0], values + memo[key][1]
        return count, values

    # scopes ----------------------------------------------------------------------------------
    def _scope(
        self,
        graph: dict[str, Any],
        prefix: str,
        definition: dict[str, Any] | None,
        parent: _Scope | None,
        instance: dict[str, Any] | None,
    ) -> _Scope:
        self.budget.check()
        level = self._levels.get(id(graph))
        if level is None:
            where = f"subgraph {definition.get('id')}" if definition is not None else "workflow"
            level = self._levels[id(graph)] = self._level(graph, where)
        return _Scope(prefix, level.nodes, level.links, definition, parent, instance)

    def _level(self, graph: dict[str, Any], where: str) -> _Level:
        links = _parse_links(graph.get("links", []), where, self.prompt.warnings)
        nodes = _nodes(graph)
        claims: dict[int, list[str]] = {}
        for nid, node in nodes.items():
            for inp in _list(node.get("inputs")):
                if isinstance(inp, dict) and isinstance(inp.get("link"), int):
                    claims.setdefault(inp["link"], []).append(f"{nid}.{inp.get('name')}")
        inside = "" if where == "workflow" else f"{where}: "
        for lid, claimants in claims.items():
            if len(claimants) > 1:
                origin = links.get(lid)
                src = f"node {origin.origin}" if origin else "nowhere (not in the table)"
                self.warn(
                    f"{inside}link {lid} is claimed by {len(claimants)} inputs "
                    f"({', '.join(claimants)}); each is wired to its origin, {src}"
                )
        return _Level(nodes, links)

    def _inner(self, scope: _Scope, node: dict[str, Any]) -> _Scope:
        nid = _key(node["id"])
        inner = scope.children.get(nid)
        if inner is None:
            definition = self.subgraphs[node["type"]]
            inner = self._scope(definition, f"{scope.prefix}{nid}:", definition, scope, node)
            scope.children[nid] = inner
        return inner

    # resolving an output to its real origin ----------------------------------------------------
    def _link(
        self, scope: _Scope, lid: int, claimant: str, seen: frozenset[Any]
    ) -> Ref | _Value | None:
        link = scope.links.get(lid)
        if link is None:
            self.warn(
                f"{claimant}: link {lid} is not in the links table; the input is left unconnected"
            )
            return None
        return self._output(scope, link.origin, link.origin_slot, seen)

    def _output(
        self, scope: _Scope, origin: Any, slot: int, seen: frozenset[Any]
    ) -> Ref | _Value | None:
        self.budget.check()
        mark = (id(scope), _key(origin), slot)
        if mark in seen:
            self.warn(f"a cycle of reroutes or bypassed nodes through node {scope.prefix}{origin}")
            return None
        seen = seen | {mark}
        if origin == SUBGRAPH_INPUT and scope.parent is not None and scope.instance is not None:
            return self._from_instance_input(scope, slot, seen)
        node = scope.nodes.get(_key(origin))
        if node is None:
            self.warn(f"a link comes from node {scope.prefix}{origin}, which does not exist")
            return None
        ntype, mode = str(node.get("type")), node.get("mode", 0)
        if ntype == "Reroute":
            return self._first_input(scope, node, seen)
        if ntype == "PrimitiveNode":
            values = node.get("widgets_values") or []
            return _Value(values[0]) if values else None
        if mode == MUTED:
            return None
        if mode == BYPASSED:
            return self._bypass(scope, node, slot, seen)
        if ntype in self.subgraphs:
            return self._from_instance_output(scope, node, slot, seen)
        return Ref(f"{scope.prefix}{node['id']}", slot)

    def _first_input(
        self, scope: _Scope, node: dict[str, Any], seen: frozenset[Any]
    ) -> Ref | _Value | None:
        for inp in _list(node.get("inputs")):
            if isinstance(inp, dict) and isinstance(inp.get("link"), int):
                return self._link(scope, inp["link"], f"node {scope.prefix}{node['id']}", seen)
        return None

    def _bypass(
        self, scope: _Scope, node: dict[str, Any], slot: int, seen: frozenset[Any]
    ) -> Ref | _Value | None:
        outputs = _list(node.get("outputs"))
        want = (
            outputs[slot].get("type")
            if slot < len(outputs) and isinstance(outputs[slot], dict)
            else None
        )
        inputs = [i for i in _list(node.get("inputs")) if isinstance(i, dict)]
        linked = [i for i in inputs if isinstance(i.get("link"), int)]
        same = inputs[slot] if slot < len(inputs) else None
        pick = None
        if same is not None and same in linked and same.get("type") in (want, "*"):
            pick = same
        else:
            pick = next((i for i in linked if i.get("type") in (want, "*")), None)
        if pick is None:
            return None
        return self._link(scope, pick["link"], f"node {scope.prefix}{node['id']}", seen)

    def _from_instance_input(
        self, scope: _Scope, slot: int, seen: frozenset[Any]
    ) -> Ref | _Value | None:
        assert (
            scope.definition is not None and scope.instance is not None and scope.parent is not None
        )
        declared = scope.definition.get("inputs") or []
        name = declared[slot].get("name") if slot < len(declared) else None
        inputs = [i for i in _list(scope.instance.get("inputs")) if isinstance(i, dict)]
        match = next((i for i in inputs if i.get("name") == name), None)
        if match is None and slot < len(inputs):
            match = inputs[slot]
        if match is None or not isinstance(match.get("link"), int):
            return None
        return self._link(
            scope.parent, match["link"], f"node {scope.parent.prefix}{scope.instance['id']}", seen
        )

    def _from_instance_output(
        self, scope: _Scope, node: dict[str, Any], slot: int, seen: frozenset[Any]
    ) -> Ref | _Value | None:
        inner = self._inner(scope, node)
        declared = inner.definition.get("outputs") or [] if inner.definition else []
        ids = declared[slot].get("linkIds") or [] if slot < len(declared) else []
        for lid in ids:
            link = inner.links.get(lid)
            if link is not None and link.target == SUBGRAPH_OUTPUT:
                return self._output(inner, link.origin, link.origin_slot, seen)
        for link in inner.links.values():
            if link.target == SUBGRAPH_OUTPUT and link.target_slot == slot:
                return self._output(inner, link.origin, link.origin_slot, seen)
        return None

    # emitting nodes ------------------------------------------------------------------------------
    def _emit(self, scope: _Scope, depth: int) -> None:
        if depth > MAX_DEPTH:
            self.warn(
                f"subgraphs nest deeper than {MAX_DEPTH} levels at {scope.prefix[:-1]}; "
                "not flattened"
            )
            return
        promoted = self._promoted(scope)
        for nid, node in scope.nodes.items():
            self.budget.check()
            if nid in (str(SUBGRAPH_INPUT), str(SUBGRAPH_OUTPUT)):
                continue
            gid, ntype = f"{scope.prefix}{nid}", str(node.get("type"))
            mode = node.get("mode", 0)
            if ntype not in self.subgraphs or mode in (MUTED, BYPASSED):
                self.prompt.order.append(gid)
            if ntype in self.subgraphs:
                if mode in (MUTED, BYPASSED):
                    reason = "muted" if mode == MUTED else "bypassed"
                    self.prompt.dropped.append(Dropped(gid, f"subgraph {ntype}", reason))
                    continue
                self._emit(self._inner(scope, node), depth + 1)
                continue
            if ntype in VIRTUAL:
                self.prompt.dropped.append(Dropped(gid, ntype, "virtual (a UI-only node)"))
                continue
            if mode == MUTED:
                self.prompt.dropped.append(Dropped(gid, ntype, "muted (mode 2)"))
                continue
            if mode == BYPASSED:
                self.prompt.dropped.append(
                    Dropped(gid, ntype, "bypassed (mode 4): its input passes through")
                )
                continue
            inputs = self._inputs(scope, node, promoted.get(nid, {}))
            self.prompt.nodes[gid] = PromptNode(gid, ntype, inputs, node.get("title"))

    def _promoted(self, scope: _Scope) -> dict[str, dict[str, Any]]:
        """Values an instance's own widgets give to its inner nodes (``proxyWidgets``)."""
        if scope.instance is None:
            return {}
        props = scope.instance.get("properties") or {}
        proxies = props.get("proxyWidgets") if isinstance(props, dict) else None
        values = scope.instance.get("widgets_values") or []
        out: dict[str, dict[str, Any]] = {}
        if isinstance(proxies, list) and isinstance(values, list) and len(values) == len(proxies):
            for entry, value in zip(proxies, values, strict=True):
                if isinstance(entry, list) and len(entry) == 2 and entry[0] != "-1":
                    out.setdefault(str(entry[0]), {})[str(entry[1])] = value
        return out

    def _inputs(
        self, scope: _Scope, node: dict[str, Any], promoted: dict[str, Any]
    ) -> dict[str, Any]:
        raw_inputs = [i for i in _list(node.get("inputs")) if isinstance(i, dict)]
        declared = [
            str(i["widget"]["name"]) for i in raw_inputs
            if isinstance(i.get("widget"), dict) and "name" in i["widget"]
        ]  # fmt: skip
        inputs: dict[str, Any] = {}
        values = node.get("widgets_values")
        if isinstance(values, dict):  # some custom nodes save widgets by name
            inputs.update({str(k): v for k, v in values.items()})
        elif isinstance(values, list):
            at = 0
            for name in widget_names(str(node.get("type")), declared, self.widgets):
                if at >= len(values):
                    break
                if name == CONTROL:
                    if is_control_value(values[at]):
                        at += 1
                    continue
                if name not in UI_ONLY_WIDGETS:
                    inputs[name] = values[at]
                at += 1
        for name, value in promoted.items():
            if name not in UI_ONLY_WIDGETS:
                inputs[name] = value
        for inp in raw_inputs:
            name, lid = str(inp.get("name")), inp.get("link")
            if not isinstance(lid, int):
                continue
            found = self._link(scope, lid, f"node {scope.prefix}{node['id']}.{name}", frozenset())
            if isinstance(found, Ref):
                inputs[name] = found
            elif isinstance(found, _Value):
                inputs[name] = found.value
            elif "widget" not in inp:
                inputs.pop(name, None)
        return inputs


def flatten(
    data: dict[str, Any],
    widgets: Mapping[str, tuple[str, ...]] | None = None,
    budget: Budget | None = None,
) -> Prompt:
    """The prompt a UI save makes (see the module docstring); ``widgets``: packs' widget names.
    Raises ``TooManyNodes`` past the caps, ``ImportStopped`` when ``budget`` runs out."""
    return Flattener(data, widgets, budget).run()
