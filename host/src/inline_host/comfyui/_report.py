"""The import report: what every ComfyUI node became, or why it was dropped, and warnings."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

Status = Literal["mapped", "unmapped", "dropped"]


class NodeReport(msgspec.Struct, kw_only=True, rename="camel"):
    """One ComfyUI node: ``mapped`` (``became`` says into what), ``unmapped``, or ``dropped``
    (``reason``: muted, bypassed, virtual, not upstream of an output)."""

    id: str
    class_type: str
    status: Status
    became: str = ""
    reason: str = ""
    title: str | None = None


class Unmapped(msgspec.Struct, kw_only=True, rename="camel"):
    """A node type with no mapping, and the ids of its executed nodes."""

    class_type: str
    ids: list[str]


class Report(msgspec.Struct, kw_only=True, rename="camel"):
    """The whole report (``complete``: every executed node mapped)."""

    source: str
    format: str
    nodes: list[NodeReport]
    unmapped: list[Unmapped]
    warnings: list[str]
    complete: bool
    one_click: bool = False

    def to_json(self) -> dict[str, Any]:
        """The report as JSON values (camelCase keys)."""
        return msgspec.to_builtins(self)


def render_text(report: Report) -> str:
    """The report for a terminal: one line per node, then unmapped types and warnings."""
    lines = [f"ComfyUI {report.format} workflow ({report.source})"]
    width = max((len(n.id) for n in report.nodes), default=2)
    for n in report.nodes:
        what = n.became if n.status == "mapped" else n.reason
        mark = {"mapped": "->", "unmapped": "!!", "dropped": "--"}[n.status]
        lines.append(f"  {n.id.rjust(width)} {n.class_type:<28} {mark} {what}")
    if report.unmapped:
        lines.append("unmapped node types:")
        lines += [f"  {u.class_type}: node(s) {', '.join(u.ids)}" for u in report.unmapped]
    if report.warnings:
        lines.append("warnings:")
        lines += [f"  {w}" for w in report.warnings]
    if report.complete:
        lines.append("every executed node mapped")
    else:
        lines.append("some executed nodes have no mapping: the graph is incomplete")
    return "\n".join(lines)
