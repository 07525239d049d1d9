"""The API prompt shape both file formats reduce to: nodes with literal inputs and links."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Ref:
    """A link: output ``slot`` of node ``node`` (an API prompt's ``[id, slot]``)."""

    node: str
    slot: int


@dataclass(slots=True)
class PromptNode:
    """One node of a prompt: its class and inputs (literal values or ``Ref``)."""

    id: str
    class_type: str
    inputs: dict[str, Any]
    title: str | None = None


@dataclass(frozen=True, slots=True)
class Dropped:
    """A UI node that never reaches the prompt, and why (muted, bypassed, virtual)."""

    id: str
    class_type: str
    reason: str


@dataclass(slots=True)
class Prompt:
    """A prompt (``nodes`` in document order), with what conversion dropped and noticed."""

    nodes: dict[str, PromptNode] = field(default_factory=dict)
    dropped: list[Dropped] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def ordered(self) -> list[str]:
        """Every node id, kept or dropped, in document order (subgraphs where they sit)."""
        return list(dict.fromkeys([*self.order, *self.nodes, *(d.id for d in self.dropped)]))

    #: Ids in document order, as the flattening met them.
    order: list[str] = field(default_factory=list)


def as_ref(value: Any) -> Ref | None:
    """``value`` as a link when it is one (``[id, slot]``, id a string or a number)."""
    if (
        isinstance(value, list | tuple)
        and len(value) == 2
        and isinstance(value[0], str | int)
        and not isinstance(value[0], bool)
        and isinstance(value[1], int)
        and not isinstance(value[1], bool)
    ):
        return Ref(str(value[0]), value[1])
    return None


def from_api(data: dict[str, Any]) -> Prompt:
    """An API prompt file as a ``Prompt`` (ids kept as the strings they are)."""
    prompt = Prompt()
    for nid, raw in data.items():
        inputs = raw.get("inputs")
        if not isinstance(inputs, dict):
            inputs = {}
        meta = raw.get("_meta")
        title = meta.get("title") if isinstance(meta, dict) else None
        converted = {k: (as_ref(v) or v) for k, v in inputs.items()}
        prompt.nodes[str(nid)] = PromptNode(str(nid), raw["class_type"], converted, title)
    return prompt
