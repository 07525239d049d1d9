"""Node descriptors as they cross the wire: exactly the /v1 contract's shape (section 3.3).

Field order is the reference's key order; optional fields are omitted rather than ``null``,
except ``outputKind`` which is always present (``image``, ``video``, ``audio``, or ``text``
since SDK 1.4: clients that don't know it ignore it). ``version``, ``paramsSchema``,
``models`` (served only when the node needs model files) and ``concurrency`` (when not 1) are
our additions. A param that picks ``llm`` folders of one architecture says so in its schema
(``paramsSchema.properties.<key>["x-inline-architecture"]``, ``Param(architecture=...)``): a
keyword JSON Schema validators ignore, so the served shape stays the contract's.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

#: The JSON Schema keyword of a param that names the model architecture it takes.
ARCHITECTURE_KEYWORD: Final = "x-inline-architecture"


class PortSpec(msgspec.Struct, frozen=True, omit_defaults=True):
    """An input or output port.

    ``portable`` (our addition, served only when true) marks an output of a handle kind whose
    values are plain data any pack may consume, such as a loader's reference to a model file.
    """

    id: str
    label: str
    kind: str
    required: bool
    portable: bool = False


class Option(msgspec.Struct, frozen=True):
    """One static choice of a select param."""

    value: str
    label: str


class ParamField(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """A param as served to clients (the contract's ParamField)."""

    key: str
    label: str
    widget: str
    default: Any
    min: int | float | None = None
    max: int | float | None = None
    step: int | float | None = None
    options_from: str | None = None
    options: tuple[Option, ...] = ()
    advanced: bool = False
    on_face: bool | None = None
    kind: str


class ModelStatus(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """A model file a node needs, and whether the models dir has it (our addition)."""

    label: str
    category: str
    file: str
    present: bool
    required: bool = True
    param: str | None = None
    repo: str | None = None
    path: str | None = None
    size: int | None = None


class Descriptor(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """A node type as served by ``GET /v1/models``."""

    type: str
    title: str
    category: str
    icon: str
    source: str
    output_kind: str | None
    inputs: tuple[PortSpec, ...]
    outputs: tuple[PortSpec, ...]
    params: tuple[ParamField, ...]
    hidden: bool = False
    version: str
    params_schema: dict[str, Any]
    models: tuple[ModelStatus, ...] = ()
    #: How many calls the host runs at once (our addition, SDK 1.4; served when not 1).
    concurrency: int = 1

    def input(self, port_id: str) -> PortSpec | None:
        """The input port named ``port_id``, if declared."""
        return next((p for p in self.inputs if p.id == port_id), None)

    def output(self, port_id: str) -> PortSpec | None:
        """The output port named ``port_id``, if declared."""
        return next((p for p in self.outputs if p.id == port_id), None)

    def param(self, key: str) -> ParamField | None:
        """The served param ``key``, if declared (internal params are not served)."""
        return next((p for p in self.params if p.key == key), None)

    def architecture(self, key: str) -> str | None:
        """The model architecture param ``key`` takes (``causal``, ``seq2seq``: its ``llm``
        picker lists only those folders), as its schema declares it; None when it names none."""
        properties = self.params_schema.get("properties")
        schema = properties.get(key) if isinstance(properties, dict) else None
        declared = schema.get(ARCHITECTURE_KEYWORD) if isinstance(schema, dict) else None
        return declared if isinstance(declared, str) else None


def encode_descriptor_json(descriptor: Descriptor) -> bytes:
    """The descriptor as the contract's JSON bytes."""
    return msgspec.json.encode(descriptor)
