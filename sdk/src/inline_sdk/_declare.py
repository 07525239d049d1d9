"""Reading a node function's signature: input ports, params (with their schema), outputs."""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal, Union, get_args, get_origin

import msgspec

from ._descriptor import ARCHITECTURE_KEYWORD, Option, ParamField, PortSpec
from ._kinds import HANDLE_KINDS, PORT_KINDS, is_list_kind
from ._media import Media
from ._mesh import Mesh
from ._models import MODEL_ARCHITECTURES

WIDGETS: Final = frozenset({"text", "textarea", "number", "boolean", "select", "seed"})
CATALOGS: Final = frozenset(
    {
        "diffusion_models",
        "checkpoints",
        "vae",
        "text_encoders",
        "loras",
        "clip_vision",
        "controlnet",
        "upscale_models",
        "latent_upscale_models",
        "model_patches",
        "embeddings",  # textual inversions; and encoder folders (architecture="encoder")
        "annotators",
        "characters",
        "diffusers",  # diffusers pipeline folders (models/diffusers/<name>/)
        "llm",  # transformers folders (models/llm/<name>/), narrowed per node by architecture
    }
)


@dataclass(frozen=True, slots=True)
class Port:
    """Metadata of an input port: its label, and its kind when the type does not tell it.

    ``id`` names the port when it differs from the argument's name (a port and a param may share
    a key on the wire, as ``model`` does on ``alibaba/z-image-turbo``; Python arguments may not).
    """

    label: str
    kind: str | None = None
    id: str | None = None


@dataclass(frozen=True, slots=True)
class Output:
    """Metadata of an output port. ``id`` is required on a single-output return annotation.

    A ``portable`` output of an engine-handle kind is a plain value (a msgspec Struct or JSON
    data, such as a reference to a model file) rather than an object kept in the worker: it
    travels as JSON, and any pack may consume it.
    """

    id: str | None = None
    label: str | None = None
    kind: str | None = None
    portable: bool = False


@dataclass(frozen=True, slots=True)
class Param:
    """Metadata of a param: how clients render it, and its constraints.

    ``min``/``max`` are enforced (they become the param's JSON Schema); so is ``step``, counted
    from ``min``, when the host validates a graph (an off-step value is refused at submit).
    ``internal`` params are accepted and validated but not listed in the served descriptor (the
    contract's undeclared params, such as ``asset`` on ``input/image``). ``architecture`` (with
    ``options_from="llm"``: ``causal`` or ``seq2seq``; with ``"embeddings"``: ``encoder``) is the
    model architecture the node runs: its picker lists only the folders of that architecture,
    and the host finds the node's models by it (it lands in the param's schema, see
    ``Descriptor.architecture``).
    """

    label: str
    widget: str | None = None
    min: float | None = None
    max: float | None = None
    step: float | None = None
    options: Sequence[str | tuple[str, str]] = ()
    options_from: str | None = None
    advanced: bool = False
    on_face: bool | None = None
    kind: str | None = None
    internal: bool = False
    architecture: str | None = None


@dataclass(frozen=True, slots=True)
class InputBinding:
    """How one input port maps onto the node function's argument."""

    name: str
    port: PortSpec
    is_list: bool


@dataclass(frozen=True, slots=True)
class OutputBinding:
    """How one output port maps onto the node function's result."""

    port: PortSpec
    media: type[Media] | None


def _split_annotated(hint: Any) -> tuple[Any, tuple[Any, ...]]:
    if get_origin(hint) is Annotated:
        args = get_args(hint)
        return args[0], tuple(args[1:])
    return hint, ()


def _strip_optional(tp: Any) -> tuple[Any, bool]:
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(get_args(tp)) == 2:
            return args[0], True
    return tp, False


def _kind_of(tp: Any) -> str | None:
    if tp is str:
        return "text"
    if isinstance(tp, type) and issubclass(tp, Media | Mesh):
        return tp.kind
    if get_origin(tp) is list:
        (item,) = get_args(tp) or (Any,)
        inner = _kind_of(item)
        return None if inner is None else inner + "[]"
    return None


def declare_input(
    where: str, p: inspect.Parameter, hint: Any, problems: list[str]
) -> InputBinding | None:
    base, extras = _split_annotated(hint)
    meta = next((e for e in extras if isinstance(e, Port)), None)
    base, optional = _strip_optional(base)
    kind = (meta.kind if meta else None) or _kind_of(base)
    if kind is None:
        problems.append(
            f"{where}: input '{p.name}' needs a kind: annotate it with a media type, str, "
            "list[...] or Port(label, kind=...)"
        )
        return None
    if kind not in PORT_KINDS:
        problems.append(f"{where}: input '{p.name}' has unknown kind '{kind}'")
        return None
    has_default = p.default is not inspect.Parameter.empty
    required = not (optional or has_default)
    label = meta.label if meta else p.name.replace("_", " ").capitalize()
    pid = (meta.id if meta else None) or p.name
    port = PortSpec(id=pid, label=label, kind=kind, required=required)
    return InputBinding(name=p.name, port=port, is_list=is_list_kind(kind))


def declare_param(
    where: str,
    p: inspect.Parameter,
    hint: Any,
    fields: list[tuple[str, Any, Any]],
    served: list[ParamField],
    problems: list[str],
) -> None:
    base, extras = _split_annotated(hint)
    meta = next((e for e in extras if isinstance(e, Param)), None) or Param(
        label=p.name.replace("_", " ").capitalize()
    )
    others = tuple(e for e in extras if not isinstance(e, Param))
    has_default = p.default is not inspect.Parameter.empty
    if not has_default and not meta.internal:
        problems.append(f"{where}: param '{p.name}' needs a default value")
    constraints: dict[str, Any] = {}
    if meta.min is not None:
        constraints["ge"] = meta.min
    if meta.max is not None:
        constraints["le"] = meta.max
    if meta.architecture is not None:
        allowed = MODEL_ARCHITECTURES.get(meta.options_from or "", ())
        if meta.architecture not in allowed:
            choices = {k: list(v) for k, v in MODEL_ARCHITECTURES.items()}
            problems.append(
                f"{where}: param '{p.name}' architecture={meta.architecture!r} needs an "
                f"options_from that declares it (by catalog: {choices})"
            )
        constraints["extra_json_schema"] = {ARCHITECTURE_KEYWORD: meta.architecture}
    typed = base
    static_options: list[Option] = [
        Option(value=o, label=o) if isinstance(o, str) else Option(value=o[0], label=o[1])
        for o in meta.options
    ]
    plain, _ = _strip_optional(base)
    if get_origin(plain) is Literal:
        static_options = static_options or [
            Option(value=str(v), label=str(v)) for v in get_args(plain)
        ]
    if constraints:
        typed = Annotated[base, msgspec.Meta(**constraints)]
    if others:
        typed = Annotated[typed, *others]
    fields.append((p.name, typed, p.default if has_default else msgspec.NODEFAULT))
    if has_default:
        try:
            msgspec.convert(p.default, typed)
        except msgspec.ValidationError as exc:
            problems.append(f"{where}: default of param '{p.name}' is invalid: {exc}")
    if meta.internal:
        return

    widget = meta.widget
    if widget is None:
        if meta.options_from or static_options:
            widget = "select"
        elif plain is bool:
            widget = "boolean"
        elif plain in (int, float):
            widget = "number"
        elif plain is str:
            widget = "text"
        else:
            problems.append(f"{where}: param '{p.name}' of type {plain!r} needs widget=...")
            return
    if widget not in WIDGETS:
        problems.append(f"{where}: param '{p.name}' has unknown widget '{widget}'")
    if meta.options_from is not None and meta.options_from not in CATALOGS:
        problems.append(
            f"{where}: param '{p.name}' options_from '{meta.options_from}' is not a catalog "
            f"(one of {sorted(CATALOGS)})"
        )
    served.append(
        ParamField(
            key=p.name,
            label=meta.label,
            widget=widget,
            default=p.default if has_default else None,
            min=meta.min,
            max=meta.max,
            step=meta.step,
            options_from=meta.options_from,
            options=tuple(static_options),
            advanced=meta.advanced,
            on_face=meta.on_face,
            kind=meta.kind or _param_kind(widget, meta.options_from),
        )
    )


def _param_kind(widget: str, options_from: str | None) -> str:
    """The contract's derivation of a param's ``kind`` (section 3.4)."""
    if options_from == "characters":
        return "character"
    if options_from is not None:
        return "model"
    return {
        "seed": "seed",
        "select": "enum",
        "textarea": "text",
        "number": "number",
        "boolean": "boolean",
        "text": "string",
    }.get(widget, "string")


def declare_outputs(where: str, hint: Any, problems: list[str]) -> tuple[list[OutputBinding], bool]:
    if hint is None or hint is type(None):
        return [], False
    if isinstance(hint, type) and issubclass(hint, tuple) and hasattr(hint, "_fields"):
        field_hints = typing.get_type_hints(hint, include_extras=True)
        bindings = []
        for name in hint._fields:  # type: ignore[attr-defined]
            binding = _output_binding(where, name, field_hints.get(name, Any), problems)
            if binding is not None:
                bindings.append(binding)
        return bindings, True
    _, extras = _split_annotated(hint)
    meta = next((e for e in extras if isinstance(e, Output)), None)
    if meta is None or meta.id is None:
        problems.append(
            f"{where}: the return annotation must be Annotated[T, Output('id', 'Label')] "
            "or a NamedTuple of outputs"
        )
        return [], False
    binding = _output_binding(where, meta.id, hint, problems)
    return ([binding] if binding else []), False


def _output_binding(where: str, pid: str, hint: Any, problems: list[str]) -> OutputBinding | None:
    base, extras = _split_annotated(hint)
    meta = next((e for e in extras if isinstance(e, Output)), None)
    kind = (meta.kind if meta else None) or _kind_of(base)
    if kind is None or kind not in PORT_KINDS:
        problems.append(f"{where}: output '{pid}' needs a known kind (got {kind!r})")
        return None
    label = (meta.label if meta else None) or pid.replace("_", " ").capitalize()
    media = base if isinstance(base, type) and issubclass(base, Media) else None
    portable = bool(meta and meta.portable)
    if portable and kind not in HANDLE_KINDS:
        problems.append(f"{where}: output '{pid}' is portable but its kind '{kind}' is no handle")
    port = PortSpec(id=pid, label=label, kind=kind, required=False, portable=portable)
    return OutputBinding(port, media)


def params_schema(params_type: type[msgspec.Struct]) -> dict[str, Any]:
    """The params' JSON Schema, with the top-level object inlined."""
    schema = msgspec.json.schema(params_type)
    defs: dict[str, Any] = dict(schema.get("$defs", {}))
    ref = schema.get("$ref", "")
    top = defs.pop(ref.rsplit("/", 1)[-1], schema) if ref else schema
    top = {k: v for k, v in top.items() if k != "title"}
    if defs:
        top["$defs"] = defs
    return top
