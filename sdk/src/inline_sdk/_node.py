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
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from ._declare import (
    InputBinding,
    Output,
    OutputBinding,
    Param,
    Port,
    declare_input,
    declare_outputs,
    declare_param,
    params_schema,
)
from ._descriptor import Descriptor, ParamField
from ._errors import NodeDeclarationError, ParamIssue, ParamsInvalid
from ._media import Media, MeshFile
from ._mesh import Mesh

__all__ = ("NodeSpec", "Output", "Param", "Port", "node")

NODE_TYPE_RE: Final = re.compile(r"^[a-z0-9][a-z0-9._-]*(/[a-z0-9][a-z0-9._-]*)*$")
SEMVER_RE: Final = re.compile(r"^\d+\.\d+\.\d+([-+][0-9A-Za-z.-]+)?$")
OUTPUT_KINDS: Final = frozenset({"image", "video", "audio", "text", "mesh"})


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
    _warmer: list[Callable[..., Any]] = field(default_factory=list, repr=False)

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
        return self._object().run

    def _object(self) -> Any:
        if not self._instance:
            self._instance.append(self.target())
        return self._instance[0]

    def warmer(self, hook: Callable[..., Any]) -> Callable[..., Any]:
        """Declare the node's warm hook (a decorator): ``hook(ctx, *, <params>)`` loads what
        those of the node's params pick (a deployment's model, before its first call), so the
        first call finds it loaded. It takes the Context and, keyword-only, any of the node's
        params by name. A class node's ``warm`` method, of the same shape, is its hook."""
        _check_warm(self.type, hook, self.param_names, skip=0)
        self._warmer[:] = [hook]
        return hook

    @property
    def warms(self) -> bool:
        """Whether the node has a warm hook."""
        if self._warmer:
            return True
        return self.is_class and callable(getattr(self.target, "warm", None))

    def warm(self, ctx: Any, params: msgspec.Struct) -> None:
        """Run the node's warm hook with the params it names (nothing without one)."""
        if self._warmer:
            hook = self._warmer[0]
        elif self.warms:
            hook = self._object().warm
        else:
            return
        names = [
            p.name
            for p in inspect.signature(hook).parameters.values()
            if p.kind == inspect.Parameter.KEYWORD_ONLY
        ]
        hook(ctx, **{name: getattr(params, name) for name in names})

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


def _check_warm(
    node_type: str, hook: Callable[..., Any], param_names: tuple[str, ...], *, skip: int
) -> None:
    """A warm hook takes the Context, then keyword-only params of the node (by name)."""
    where = f"node '{node_type}': warm hook"
    if not callable(hook):
        raise NodeDeclarationError([f"{where} must be callable"])
    params = list(inspect.signature(hook).parameters.values())[skip:]
    problems: list[str] = []
    if not params or params[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        problems.append(f"{where}: the first parameter must be the Context")
    for p in params[1:]:
        if p.kind != inspect.Parameter.KEYWORD_ONLY:
            problems.append(f"{where}: '{p.name}' must be keyword-only (a param of the node)")
        elif p.name not in param_names:
            known = ", ".join(param_names) or "none"
            problems.append(f"{where}: '{p.name}' is not a param of the node (its params: {known})")
    if problems:
        raise NodeDeclarationError(problems)


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
            declare_param(where, p, hint, fields, served, problems)
        else:
            binding = declare_input(where, p, hint, problems)
            if binding is not None:
                inputs.append(binding)

    outputs, multi = declare_outputs(where, hints.get("return", None), problems)
    if problems:
        raise NodeDeclarationError(problems)
    warm = getattr(target, "warm", None) if is_class else None
    if warm is not None:
        _check_warm(type, warm, tuple(names), skip=1)

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
        params_schema=params_schema(params_type),
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
