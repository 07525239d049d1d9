"""A prompt to an Inline run document: only ancestors of output nodes, each node through its rule.

Conversion is lazy from the outputs (``SaveImage`` / ``PreviewImage`` and packs' output nodes):
resolving an input converts its source first, so a dangling node (a disconnected LoRA, a decoy
sampler) is never touched, and only what ComfyUI would execute is reported as mapped or not.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._errors import Budget
from ._prompt import Prompt, PromptNode, Ref
from ._report import NodeReport, Report, Unmapped
from ._values import Edge, Value

#: A rule converts one ComfyUI node and returns its outputs by slot.
Rule = Callable[["Converter", PromptNode], dict[int, Value]]


@dataclass(frozen=True, slots=True)
class Table:
    """The importer's vocabulary: a rule per ComfyUI class, which classes are outputs, and the
    widget names of classes the built-in list does not know (packs')."""

    rules: Mapping[str, Rule]
    outputs: frozenset[str]
    widgets: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Imported:
    """The result: a ``/v1`` run document and its report."""

    graph: dict[str, Any]
    target: str | None
    report: Report
    #: The target's ``SaveImage`` ``filename_prefix`` by node id: ``inline run`` names its
    #: files after it (``<prefix>_00001_.png``), as ComfyUI does.
    output_names: dict[str, str] = field(default_factory=dict)

    @property
    def document(self) -> dict[str, Any]:
        """``{graph, target}``, and ``outputNames`` where a ``SaveImage`` named its files."""
        doc: dict[str, Any] = {"graph": self.graph, "target": self.target}
        if self.output_names:
            doc["outputNames"] = dict(self.output_names)
        return doc

    def to_json(self) -> dict[str, Any]:
        """``{graph, target, report}`` (and ``outputNames``, as in ``document``)."""
        return {**self.document, "report": self.report.to_json()}


class Converter:
    """Builds the Inline graph for one prompt (rules call back into it)."""

    def __init__(
        self, prompt: Prompt, table: Table, base_dir: Path | None, budget: Budget | None = None
    ) -> None:
        self.prompt = prompt
        self.table = table
        self.base_dir = base_dir
        self.budget = budget or Budget.start("input")
        self.nodes: list[dict[str, Any]] = []
        self.warnings: list[str] = list(prompt.warnings)
        self._warned: set[str] = set(self.warnings)  # a set: a hostile file warns a lot
        self.reports: dict[str, NodeReport] = {}
        self._done: dict[str, dict[int, Value]] = {}
        self._active: set[str] = set()
        self.target: str | None = None
        #: Each sampler node's ComfyUI sampler and scheduler names, before mapping.
        self.names: dict[str, tuple[str, str]] = {}
        #: The target's file name prefix (``SaveImage``'s ``filename_prefix``), by node id.
        self.output_names: dict[str, str] = {}

    # for rules ------------------------------------------------------------------------------------
    def warn(self, message: str) -> None:
        """Add a warning to the report (once)."""
        if message not in self._warned:
            self._warned.add(message)
            self.warnings.append(message)

    def add(
        self,
        node_id: str,
        node_type: str,
        params: dict[str, Any] | None = None,
        inputs: Mapping[str, Edge | None] | None = None,
    ) -> str:
        """Add an Inline node (inputs that are ``None`` stay unwired); its id."""
        node: dict[str, Any] = {"id": node_id, "type": node_type, "params": dict(params or {})}
        wired = {
            port: {"from": e.node, "output": e.port} for port, e in (inputs or {}).items() if e
        }
        if wired:
            node["inputs"] = wired
        self.nodes.append(node)
        return node_id

    def input(self, node: PromptNode, name: str) -> Value | None:
        """The converted source of a linked input (``None`` when unlinked or unconvertible)."""
        raw = node.inputs.get(name)
        if not isinstance(raw, Ref):
            return None
        return self.source(raw, f"node {node.id} ({node.class_type}) input '{name}'")

    def literal(self, node: PromptNode, name: str, default: Any = None) -> Any:
        """A widget value (``default`` when absent or linked to something not a literal)."""
        raw = node.inputs.get(name, default)
        if isinstance(raw, Ref):
            self.warn(
                f"node {node.id} ({node.class_type}) input '{name}' is computed by node "
                f"{raw.node}; its default {default!r} is used"
            )
            return default
        return raw

    def integer(self, node: PromptNode, name: str, default: int) -> int:
        """A widget value that must be a whole number (``default``, warned, when it is not)."""
        return int(self.real(node, name, default))

    def real(self, node: PromptNode, name: str, default: float) -> float:
        """A widget value that must be a number (``default``, warned, when it is not)."""
        value = self.literal(node, name, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.warn(
                f"node {node.id} ({node.class_type}) input '{name}' is {value!r}, not a number; "
                f"{default!r} is used"
            )
            return default
        return value

    def source(self, ref: Ref, where: str) -> Value | None:
        """What output ``ref`` converts to, converting its node first."""
        outputs = self.convert(ref.node, where)
        if outputs is None:
            return None
        value = outputs.get(ref.slot)
        if value is None:
            self.warn(f"{where}: output {ref.slot} of node {ref.node} has no Inline equivalent")
        return value

    def became(self, node: PromptNode, text: str) -> None:
        """Say in the report what ``node`` became."""
        self.reports[node.id] = NodeReport(
            id=node.id, class_type=node.class_type, status="mapped", became=text, title=node.title
        )

    # the walk ---------------------------------------------------------------------------------
    def convert(self, node_id: str, where: str) -> dict[int, Value] | None:
        """Convert ``node_id`` once; ``None`` when it is missing, unmapped or in a cycle."""
        if node_id in self._done:
            return self._done[node_id]
        self.budget.check()
        node = self.prompt.nodes.get(node_id)
        if node is None:
            self.warn(f"{where}: links to node {node_id}, which is not in the workflow")
            return None
        if node_id in self._active:
            self.warn(f"{where}: a cycle through node {node_id}")
            return None
        rule = self.table.rules.get(node.class_type)
        if rule is None:
            self.reports[node_id] = NodeReport(
                id=node_id, class_type=node.class_type, status="unmapped",
                reason="no mapping for this node type", title=node.title,
            )  # fmt: skip
            self._done[node_id] = {}
            for name, raw in node.inputs.items():  # ComfyUI runs its ancestors: report them
                if isinstance(raw, Ref):
                    self.convert(raw.node, f"node {node_id} input '{name}'")
            return None
        self._active.add(node_id)
        try:
            outputs = rule(self, node)
        finally:
            self._active.discard(node_id)
        self._done[node_id] = outputs
        if node_id not in self.reports:
            self.became(node, "(folded into its consumers)")
        return outputs

    def run(self, source: str, fmt: str) -> Imported:
        outputs = [n for n in self.prompt.nodes.values() if n.class_type in self.table.outputs]
        if not outputs:
            self.warn("the workflow has no output node (SaveImage, PreviewImage): nothing runs")
        for node in outputs:
            self.convert(node.id, "output")
        for extra in outputs[1:]:
            if extra.id in self.reports and self.reports[extra.id].status == "mapped":
                self.warn(
                    f"output node {extra.id} ({extra.class_type}) is not the run's target: a run "
                    "has one target, the first output's"
                )
        report = self.report(source, fmt)
        graph = {"schemaVersion": 1, "nodes": self.nodes}
        return Imported(graph, self.target, report, dict(self.output_names))

    def report(self, source: str, fmt: str) -> Report:
        """The report of the walk so far (every node of the prompt, in order)."""
        rows: list[NodeReport] = []
        dropped = {d.id: d for d in self.prompt.dropped}
        for nid in self.prompt.ordered():
            d = dropped.get(nid)
            if d is not None:
                rows.append(
                    NodeReport(id=d.id, class_type=d.class_type, status="dropped", reason=d.reason)
                )
                continue
            node = self.prompt.nodes[nid]
            row = self.reports.get(nid) or NodeReport(
                id=nid, class_type=node.class_type, status="dropped",
                reason="not upstream of an output node (ComfyUI never runs it)", title=node.title,
            )  # fmt: skip
            rows.append(row)
        by_type: dict[str, list[str]] = {}
        for row in rows:
            if row.status == "unmapped":
                by_type.setdefault(row.class_type, []).append(row.id)
        unmapped = [Unmapped(class_type=t, ids=ids) for t, ids in by_type.items()]
        return Report(
            source=source, format=fmt, nodes=rows, unmapped=unmapped,
            warnings=self.warnings, complete=not unmapped and self.target is not None,
        )  # fmt: skip


def convert(
    prompt: Prompt, table: Table, *, source: str, fmt: str, base_dir: Path | None
) -> Imported:
    """The Inline run document and report for ``prompt``."""
    return Converter(prompt, table, base_dir).run(source, fmt)
