"""What the node bases (``Image2Mesh``, ``ChatCompletion``) share: the declaration of a subclass
that names a node ``type``, and the ``run`` a base declares around the method a subclass
implements, whose keyword-only arguments are the node's params."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from ._context import Context
from ._errors import NodeDeclarationError
from ._node import NodeSpec, build_spec

POSITIONAL = inspect.Parameter.POSITIONAL_OR_KEYWORD


class NodeBase:
    """A node base: each subclass that names a ``type`` (``class X(Base, type="ns/x")``) is
    declared as that node, its ``run`` made by the base's ``declare``; one without is an
    intermediate base. ``spec`` is the declared node (return it from ``inline_nodes``)."""

    spec: ClassVar[NodeSpec]
    #: What each base sets: its nodes' output kind, and their default category and icon.
    _output_kind: ClassVar[str]
    _category: ClassVar[str]
    _icon: ClassVar[str]

    def __init_subclass__(
        cls,
        *,
        type: str | None = None,
        title: str = "",
        category: str | None = None,
        icon: str | None = None,
        version: str = "1.0.0",
        hidden: bool = False,
        concurrency: int = 1,
        **kwargs: Any,
    ) -> None:
        super().__init_subclass__(**kwargs)
        if type is None:  # an intermediate base: declares no node
            return
        cls.run = cls._declare(type)  # type: ignore[attr-defined]
        cls.spec = build_spec(
            cls,
            type=type,
            title=title or cls.__name__,
            category=category or cls._category,
            icon=icon or cls._icon,
            output_kind=cls._output_kind,
            version=version,
            hidden=hidden,
            concurrency=concurrency,
        )

    @classmethod
    def _declare(cls, node_type: str) -> Callable[..., Any]:
        """The ``run`` of the node ``cls`` declares (for ``build_spec``)."""
        raise NotImplementedError


def keyword_params(
    cls: type, base: type, method: str, node_type: str, shape: str
) -> list[inspect.Parameter]:
    """The params ``cls.<method>`` declares after its leading arguments (``shape`` names them:
    ``self, ctx, image``), each with its resolved annotation; raises ``NodeDeclarationError``
    when the method is not implemented, or a param is not keyword-only."""
    where = f"node '{node_type}'"
    impl = getattr(cls, method)
    if impl is getattr(base, method):
        raise NodeDeclarationError([f"{where}: {cls.__name__} must implement {method}"])
    try:
        hints = typing.get_type_hints(impl, include_extras=True)
    except Exception as exc:
        raise NodeDeclarationError([f"{where}: cannot resolve annotations: {exc}"]) from exc
    skip = len(shape.split(","))
    params = list(inspect.signature(impl).parameters.values())[skip:]
    wrong = [p.name for p in params if p.kind is not inspect.Parameter.KEYWORD_ONLY]
    if wrong:
        raise NodeDeclarationError(
            [f"{where}: {method}({shape}, *, ...) params must be keyword-only: {wrong}"]
        )
    return [p.replace(annotation=hints.get(p.name, Any)) for p in params]


def declare_run(
    cls: type,
    run: Callable[..., Any],
    head: Sequence[inspect.Parameter],
    params: Sequence[inspect.Parameter],
    returns: Any,
) -> Callable[..., Any]:
    """``run`` signed ``run(self, ctx, <head>, *, <params>) -> returns`` for ``build_spec``."""
    run.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter("self", POSITIONAL),
            inspect.Parameter("ctx", POSITIONAL, annotation=Context),
            *head,
            *params,
        ],
        return_annotation=returns,
    )
    run.__annotations__ = {
        "ctx": Context,
        **{p.name: p.annotation for p in (*head, *params)},
        "return": returns,
    }
    run.__qualname__ = f"{cls.__qualname__}.run"
    return run
