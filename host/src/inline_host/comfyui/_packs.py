"""Packs' mappings (``inline_comfyui_mappings``, carried in their handshakes) as importer rules."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from inline_sdk import ComfyMapping

from ._convert import Converter, Rule, Table
from ._prompt import PromptNode, Ref
from ._rules import BUILTIN_RULES, OUTPUTS
from ._values import Edge, ModelValue, Value


def declared_rule(mapping: ComfyMapping) -> Rule:
    """The rule a pack's declarative mapping describes."""

    def rule(cv: Converter, node: PromptNode) -> dict[int, Value]:
        params: dict[str, Any] = dict(mapping.fixed)
        inputs: dict[str, Edge | None] = {}
        for name, raw in node.inputs.items():
            if isinstance(raw, Ref):
                if name not in mapping.inputs:
                    cv.warn(
                        f"node {node.id} ({node.class_type}): linked input '{name}' is not mapped"
                    )
                    continue
                value = cv.input(node, name)
                edge = value.edge if isinstance(value, ModelValue) else value
                inputs[mapping.inputs[name]] = edge if isinstance(edge, Edge) else None
            elif name in mapping.params:
                params[mapping.params[name]] = raw
        cv.add(node.id, mapping.node, params, inputs)
        outputs: dict[int, Value] = {
            i: Edge(node.id, port) for i, port in enumerate(mapping.outputs)
        }
        if mapping.output and cv.target is None:
            cv.target = node.id
            cv.became(node, f"{mapping.node} {node.id}, the run's target")
        else:
            cv.became(node, f"{mapping.node} {node.id}")
        return outputs

    return rule


def build_table(mappings: Iterable[ComfyMapping] = ()) -> Table:
    """The built-in rules, then packs' (a pack's mapping of a class replaces the built-in)."""
    rules: dict[str, Rule] = dict(BUILTIN_RULES)
    outputs = set(OUTPUTS)
    widgets: dict[str, tuple[str, ...]] = {}
    for m in mappings:
        rules[m.class_type] = declared_rule(m)
        if m.output:
            outputs.add(m.class_type)
        if m.widgets:
            widgets[m.class_type] = tuple(m.widgets)
    return Table(rules=rules, outputs=frozenset(outputs), widgets=widgets)
