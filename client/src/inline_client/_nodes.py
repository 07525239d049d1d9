"""Finding the node of a task in the server's descriptors (``GET /v1/models``), by what each
node declares (its ports, its ``model`` picker), never by its id: a pack that declares the same
contract under another id serves the same call."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

import msgspec

#: The JSON Schema keyword of a param that names the model architecture it takes.
ARCHITECTURE_KEYWORD: Final = "x-inline-architecture"


class PortDoc(msgspec.Struct, frozen=True):
    """An input or output port, as far as finding a node needs it."""

    id: str
    kind: str


class ParamDoc(msgspec.Struct, frozen=True, rename="camel"):
    """A served param, as far as finding a node needs it."""

    key: str
    options_from: str | None = None


class NodeDoc(msgspec.Struct, frozen=True, rename="camel"):
    """A node descriptor, as far as finding a node needs it."""

    type: str
    output_kind: str | None = None
    inputs: tuple[PortDoc, ...] = ()
    outputs: tuple[PortDoc, ...] = ()
    params: tuple[ParamDoc, ...] = ()
    params_schema: dict[str, Any] = {}

    def has_input(self, port_id: str, kind: str) -> bool:
        return any(p.id == port_id and p.kind == kind for p in self.inputs)

    def picks(self, catalog: str) -> bool:
        """Whether its ``model`` param picks from ``catalog``."""
        return any(p.key == "model" and p.options_from == catalog for p in self.params)

    def architecture(self) -> str | None:
        """The model architecture its ``model`` param declares, if any."""
        properties = self.params_schema.get("properties")
        schema = properties.get("model") if isinstance(properties, dict) else None
        declared = schema.get(ARCHITECTURE_KEYWORD) if isinstance(schema, dict) else None
        return declared if isinstance(declared, str) else None


class NodeList(msgspec.Struct, frozen=True):
    """``GET /v1/models``, as far as finding a node needs it."""

    models: tuple[NodeDoc, ...] = ()


def is_rewriter(node: NodeDoc) -> bool:
    """A ``text`` to ``text`` node over ``llm`` folders of the encoder-decoder architecture."""
    return (
        node.has_input("text", "text")
        and any(p.id == "text" and p.kind == "text" for p in node.outputs)
        and node.picks("llm")
        and node.architecture() == "seq2seq"
    )


def is_folder_generator(node: NodeDoc) -> bool:
    """An image node over a ``prompt`` whose ``model`` picks a ``models/diffusers/`` folder."""
    return (
        node.output_kind == "image" and node.has_input("prompt", "text") and node.picks("diffusers")
    )


def find_node(nodes: Sequence[NodeDoc], fits: Callable[[NodeDoc], bool]) -> str | None:
    """The type of the first node that ``fits``, or None."""
    return next((n.type for n in nodes if fits(n)), None)
