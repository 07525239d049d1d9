"""Portable outputs (a loader's file reference) may cross packs; other handles may not."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
import pytest
from inline_core import DictCatalog, GraphInvalid, NodeEntry, parse_graph, validate
from inline_sdk import Context, Output, Port, node


class Ref(msgspec.Struct, frozen=True):
    file: str


@node("a/load", title="Load", category="Loaders")
def load(ctx: Context) -> Annotated[Ref, Output("model", "Model", kind="model", portable=True)]:
    return Ref("x.safetensors")


@node("a/handle", title="Handle", category="Loaders")
def handle(ctx: Context) -> Annotated[Any, Output("model", "Model", kind="model")]:
    raise NotImplementedError


@node("b/use", title="Use", category="Generate")
def use(
    ctx: Context, model: Annotated[Any, Port("Model", kind="model")]
) -> Annotated[str, Output("text", "Text")]:
    return str(model)


CATALOG = DictCatalog(
    [NodeEntry(load.descriptor, "a", "1"), NodeEntry(handle.descriptor, "a", "1"),
     NodeEntry(use.descriptor, "b", "1")]
)  # fmt: skip


def graph(source: str) -> Any:
    return parse_graph(
        {
            "schemaVersion": 1,
            "nodes": [
                {"id": "l", "type": source},
                {"id": "u", "type": "b/use", "inputs": {"model": {"from": "l", "output": "model"}}},
            ],
        }
    )


def test_a_portable_output_crosses_packs() -> None:
    validate(graph("a/load"), "u", CATALOG)


def test_a_plain_handle_still_does_not() -> None:
    with pytest.raises(GraphInvalid) as err:
        validate(graph("a/handle"), "u", CATALOG)
    assert "engine handles stay in the pack that made them" in err.value.issues[0].message
