"""Declaring nodes: one typed function (or class) is the descriptor, the validation and the call.

A node is a function whose first parameter is the :class:`~inline_sdk.Context`, whose other
positional parameters are its **input ports**, whose keyword-only parameters are its **params**, and
whose return annotation names its **output ports**::

    @node("text/join", title="Join Text", category="Text")
    def join(
        ctx: Context,
        a: Annotated[str, Port("A")],
        b: Annotated[str, Port("B")],
        *,
        separator: Annotated[str, Param("Separator")] = " ",
    ) -> Annotated[str, Output("text", "Text")]:
        return a + separator + b

A class works too: its ``run`` method is declared the same way and one instance per worker is
made on first use, so a node can keep models between calls.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Final, Literal, Union, get_args, get_origin

import msgspec

from ._descriptor import Descriptor, Option, ParamField, PortSpec
from ._errors import NodeDeclarationError, ParamIssue, ParamsInvalid
from ._kinds import HANDLE_KINDS, PORT_KINDS, is_list_kind
from ._media import Media, MeshFile
from ._mesh import Mesh

__all__ = ("NodeSpec", "Output", "Param", "Port", "node")

NODE_TYPE_RE: Final = re.compile(r"^[a-z0-9][a-z0-9._-]*(/[a-z0-9][a-z0-9._-]*)*$")
SEMVER_RE: Final = re.compile(r"^\d+\.\d+\.\d+([-+][0-9A-Za-z.-]+)?$")
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
        "embeddings",
        "annotators",
        "characters",
        "diffusers",
    }
)
OUTPUT_KINDS: Final = frozenset({"image", "video", "audio", "text", "mesh"})


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

    ``min``/``max`` are enforced (they become the param's JSON Schema); ``step`` is advisory.
    ``internal`` params are accepted and validated but not listed in the served descriptor (the
    contract's undeclared params, such as ``asset`` on ``input/image``).
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


@dataclass(frozen=True)
class NodeSpec:
    """A declared node: its descriptor, its params type, and the callable behind it."""

    descriptor: Descriptor
    inputs: tuple[InputBinding, ...]
    outputs: tuple[OutputBinding, ...]
    params_type: type[msgspec.Struct]
    param_names: tuple[str, ...]
    target: Callable[..., Any]
    is_class: bool
    multi_output: bool
    _instance: list[Any] = field(default_factory=list, repr=False)

    @property
    def type(self) -> str:
        """The node type id."""
        return self.descriptor.type

    def decode_params(self, raw: dict[str, Any]) -> msgspec.Struct:
        """Validate ``raw`` params against the schema and fill defaults; raise ``ParamsInvalid``."""
        try:
            return msgspec.convert(raw, self.params_type)
        except msgspec.ValidationError as exc:
            message = str(exc)
            path = "$"
            if " - at `" in message:
                message, _, at = message.rpartition(" - at `")
                path = at.rstrip("`")
            raise ParamsInvalid(self.type, [ParamIssue(path=path, message=message)]) from None

    def callable(self) -> Callable[..., Any]:
        """The function to call (for a class node, the ``run`` method of its one instance)."""
        if not self.is_class:
            return self.target
        if not self._instance:
            self._instance.append(self.target())
        return self._instance[0].run

    def invoke(self, ctx: Any, inputs: dict[str, Any], params: msgspec.Struct) -> dict[str, Any]:
        """Call the node and return its outputs keyed by port id."""
        kwargs = {b.name: inputs.get(b.port.id) for b in self.inputs}
        for name in self.param_names:
            kwargs[name] = getattr(params, name)
        result = self.callable()(ctx, **kwargs)
        return self.split_outputs(result)

    def split_outputs(self, result: Any) -> dict[str, Any]:
        """Map a node's return value onto its output ports, checking each value's type."""
        if not self.outputs:
            return {}
        if self.multi_output:
            values = result._asdict() if hasattr(result, "_asdict") else dict(result)
        else:
            values = {self.outputs[0].port.id: result}
        out: dict[str, Any] = {}
        for binding in self.outputs:
            pid = binding.port.id
            if pid not in values:
                raise TypeError(f"node '{self.type}' returned no value for output '{pid}'")
            value = values[pid]
            if binding.port.kind == "mesh":
                value = _mesh_media(self.type, pid, value)
            elif binding.media is not None and not isinstance(value, Media):
                raise TypeError(
                    f"node '{self.type}' output '{pid}' must be {binding.media.__name__}, "
                    f"got {type(value).__name__}"
                )
            if binding.port.kind == "text" and not isinstance(value, str):
                raise TypeError(
                    f"node '{self.type}' output '{pid}' must be str, got {type(value).__name__}"
                )
            out[pid] = value
        return out

    def __call__(self, ctx: Any, *args: Any, **kwargs: Any) -> Any:
        """Call the node's function directly (handy in a pack's own unit tests)."""
        return self.callable()(ctx, *args, **kwargs)


def _mesh_media(node_type: str, pid: str, value: Any) -> MeshFile:
    """A ``mesh`` output's value as GLB media (a ``Mesh`` is written here, in the worker)."""
    if isinstance(value, Mesh):
        return value.to_media()
    if isinstance(value, MeshFile):
        return value
    raise TypeError(
        f"node '{node_type}' output '{pid}' must be a Mesh (inline_sdk.mesh), "
        f"got {type(value).__name__}"
    )


def node(
    type: str,
    *,
    title: str,
    category: str,
    icon: str = "",
    output_kind: str | None = None,
    version: str = "1.0.0",
    hidden: bool = False,
    concurrency: int = 1,
) -> Callable[[Callable[..., Any] | type], NodeSpec]:
    """Declare a node type. See the module docstring for the shape of the function.

    ``concurrency`` is how many calls of this node the host runs at once (across all runs);
    calls beyond it wait their turn, an earlier run's first.
    """

    def decorate(target: Callable[..., Any] | type) -> NodeSpec:
        return build_spec(
            target,
            type=type,
            title=title,
            category=category,
            icon=icon,
            output_kind=output_kind,
            version=version,
            hidden=hidden,
            concurrency=concurrency,
        )

    return decorate


def build_spec(
    target: Callable[..., Any] | type,
    *,
    type: str,
    title: str,
    category: str,
    icon: str,
    output_kind: str | None,
    version: str,
    hidden: bool,
    concurrency: int = 1,
) -> NodeSpec:
    """Build a ``NodeSpec``; raise ``NodeDeclarationError`` listing every problem."""
    problems: list[str] = []
    where = f"node '{type}'"
    if not NODE_TYPE_RE.match(type):
        problems.append(f"{where}: type id must match {NODE_TYPE_RE.pattern}")
    if not SEMVER_RE.match(version):
        problems.append(f"{where}: version '{version}' is not semver (MAJOR.MINOR.PATCH)")
    if output_kind is not None and output_kind not in OUTPUT_KINDS:
        problems.append(f"{where}: output_kind must be one of {sorted(OUTPUT_KINDS)} or None")
    if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
        problems.append(f"{where}: concurrency must be a whole number >= 1, got {concurrency!r}")

    is_class = inspect.isclass(target)
    func = getattr(target, "run", None) if is_class else target
    if func is None or not callable(func):
        raise NodeDeclarationError([f"{where}: a class node needs a run(self, ctx, ...) method"])
    try:
        hints = typing.get_type_hints(func, include_extras=True)
    except Exception as exc:  # annotations that do not evaluate
        raise NodeDeclarationError([f"{where}: cannot resolve annotations: {exc}"]) from exc
    sig = inspect.signature(func)
    params_list = list(sig.parameters.values())
    if is_class:
        params_list = params_list[1:]
    if not params_list or params_list[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        raise NodeDeclarationError([f"{where}: the first parameter must be the Context"])

    inputs: list[InputBinding] = []
    fields: list[tuple[str, Any, Any]] = []
    served: list[ParamField] = []
    names: list[str] = []
    for p in params_list[1:]:
        hint = hints.get(p.name, Any)
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            problems.append(f"{where}: *args/**kwargs are not allowed ('{p.name}')")
        elif p.kind == inspect.Parameter.KEYWORD_ONLY:
            names.append(p.name)
            _declare_param(where, p, hint, fields, served, problems)
        else:
            binding = _declare_input(where, p, hint, problems)
            if binding is not None:
                inputs.append(binding)

    outputs, multi = _declare_outputs(where, hints.get("return", None), problems)
    if problems:
        raise NodeDeclarationError(problems)

    params_type = msgspec.defstruct(
        "Params", fields, kw_only=True, forbid_unknown_fields=False, frozen=True
    )
    descriptor = Descriptor(
        type=type,
        title=title,
        category=category,
        icon=icon,
        source="",
        output_kind=output_kind,
        inputs=tuple(b.port for b in inputs),
        outputs=tuple(b.port for b in outputs),
        params=tuple(served),
        hidden=hidden,
        version=version,
        params_schema=_params_schema(params_type),
        concurrency=concurrency,
    )
    return NodeSpec(
        descriptor=descriptor,
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        params_type=params_type,
        param_names=tuple(names),
        target=target,
        is_class=is_class,
        multi_output=multi,
    )


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


def _declare_input(
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


def _declare_param(
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


def _declare_outputs(
    where: str, hint: Any, problems: list[str]
) -> tuple[list[OutputBinding], bool]:
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


def _params_schema(params_type: type[msgspec.Struct]) -> dict[str, Any]:
    """The params' JSON Schema, with the top-level object inlined."""
    schema = msgspec.json.schema(params_type)
    defs: dict[str, Any] = dict(schema.get("$defs", {}))
    ref = schema.get("$ref", "")
    top = defs.pop(ref.rsplit("/", 1)[-1], schema) if ref else schema
    top = {k: v for k, v in top.items() if k != "title"}
    if defs:
        top["$defs"] = defs
    return top
