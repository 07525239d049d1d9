"""Warm hooks: what a deployment's new replica runs to load its model before its first call. A
hook takes the Context and, keyword-only, the node's params it needs; a bad one is refused when
the node is declared, naming what is wrong."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from inline_sdk import Context, NodeDeclarationError, Output, Param, node


def declare() -> Any:
    @node("t/fn", title="Fn", category="T")
    def fn(
        ctx: Context,
        *,
        model: Annotated[str, Param("Model")] = "default.safetensors",
        steps: Annotated[int, Param("Steps")] = 4,
    ) -> Annotated[str, Output("text", "Text")]:
        return model

    return fn


def test_a_function_nodes_warmer_gets_the_params_it_names_with_their_defaults():
    fn = declare()
    assert not fn.warms
    fn.warm(None, fn.decode_params({}))  # no hook: nothing to do
    seen: list[dict[str, Any]] = []

    @fn.warmer
    def _(ctx: Any, *, model: str) -> None:
        seen.append({"ctx": ctx, "model": model})

    assert fn.warms
    fn.warm("ctx", fn.decode_params({"steps": 9}))
    fn.warm("ctx", fn.decode_params({"model": "b.safetensors"}))
    assert seen == [
        {"ctx": "ctx", "model": "default.safetensors"},
        {"ctx": "ctx", "model": "b.safetensors"},
    ]


def test_a_class_nodes_warm_method_runs_on_the_instance_its_calls_use():
    @node("t/cls", title="Cls", category="T")
    class Cls:
        def __init__(self) -> None:
            self.loaded: list[str] = []

        def warm(self, ctx: Any, *, model: str) -> None:
            self.loaded.append(model)

        def run(
            self, ctx: Any, *, model: Annotated[str, Param("Model")] = "m"
        ) -> Annotated[str, Output("text", "Text")]:
            return ",".join(self.loaded) or "cold"

    assert Cls.warms
    Cls.warm(None, Cls.decode_params({"model": "x"}))
    assert Cls.invoke(None, {}, Cls.decode_params({})) == {"text": "x"}


@pytest.mark.parametrize(
    ("hook", "problem"),
    [
        (lambda ctx, model: None, "'model' must be keyword-only"),
        (lambda ctx, *, size: None, "'size' is not a param of the node (its params: model, steps)"),
        (lambda *, model: None, "the first parameter must be the Context"),
    ],
)
def test_a_bad_warmer_is_refused_naming_the_problem(hook: Any, problem: str):
    fn = declare()
    with pytest.raises(NodeDeclarationError, match="warm hook") as err:
        fn.warmer(hook)
    assert problem in str(err.value)
    assert not fn.warms


def test_a_class_with_a_bad_warm_method_is_refused_when_declared():
    with pytest.raises(NodeDeclarationError, match="'seed' is not a param of the node"):

        @node("t/bad", title="Bad", category="T")
        class Bad:
            def warm(self, ctx: Any, *, seed: int) -> None: ...

            def run(
                self, ctx: Any, *, model: Annotated[str, Param("Model")] = ""
            ) -> Annotated[str, Output("text", "Text")]:
                return model
