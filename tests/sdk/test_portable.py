"""SDK 1.2 additions: portable outputs, port ids that differ from argument names, take params."""

from __future__ import annotations

import json
from typing import Annotated, Any

import msgspec
import pytest
from inline_sdk import Context, Image, NodeDeclarationError, Output, Param, Port, node
from inline_sdk.protocol import InlineBytes, MediaValue


class Ref(msgspec.Struct, frozen=True):
    file: str


@node("x/load", title="Load", category="Loaders")
def load(ctx: Context) -> Annotated[Ref, Output("model", "Model", kind="model", portable=True)]:
    return Ref("x")


@node("x/gen", title="Gen", category="Generate")
def gen(
    ctx: Context,
    model_in: Annotated[Any, Port("Model", kind="model", id="model")] = None,
    *,
    model: Annotated[str, Param("Model", widget="select", options_from="diffusion_models")] = "",
) -> Annotated[Image, Output("image", "Image")]:
    return Image(b"png", params={"model": model, "handle": model_in})


def test_portable_is_served_only_where_true() -> None:
    doc = json.loads(msgspec.json.encode(load.descriptor))
    assert doc["outputs"] == [
        {"id": "model", "label": "Model", "kind": "model", "required": False, "portable": True}
    ]
    plain = json.loads(msgspec.json.encode(gen.descriptor))
    assert "portable" not in plain["outputs"][0] and "portable" not in plain["inputs"][0]


def test_a_port_and_a_param_may_share_a_key() -> None:
    assert [p.id for p in gen.descriptor.inputs] == ["model"]
    assert [p.key for p in gen.descriptor.params] == ["model"]
    out = gen.invoke(None, {"model": "handle"}, gen.decode_params({"model": "z.safetensors"}))
    assert out["image"].params == {"model": "z.safetensors", "handle": "handle"}


def test_only_handle_kinds_may_be_portable() -> None:
    with pytest.raises(NodeDeclarationError, match="portable but its kind 'text' is no handle"):

        @node("x/bad", title="Bad", category="Test")
        def bad(ctx: Context) -> Annotated[str, Output("text", "Text", portable=True)]:
            return ""


def test_take_params_travel_with_media() -> None:
    value = MediaValue(kind="image", ext="png", data=InlineBytes(b"x"), params={"seed": 7})
    for enc, dec in (
        (msgspec.json.encode, msgspec.json.decode),
        (msgspec.msgpack.encode, msgspec.msgpack.decode),
    ):
        assert dec(enc(value), type=MediaValue) == value
    old = msgspec.json.decode(b'{"kind":"image","ext":"png","data":{"t":"inline","data":""}}',
                              type=MediaValue)  # fmt: skip
    assert old.params is None
