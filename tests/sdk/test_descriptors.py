"""Descriptors derived from node declarations, checked against golden JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Literal, NamedTuple

import msgspec
import pytest
from inline_sdk import (
    Context,
    Image,
    NodeDeclarationError,
    Output,
    Param,
    ParamsInvalid,
    Port,
    Video,
    node,
)

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"


@pytest.fixture(scope="module")
def basics():
    sys.path.insert(0, str(ROOT / "packs" / "basics" / "src"))
    try:
        import inline_basics

        yield {spec.type: spec for spec in inline_basics.inline_nodes()}
    finally:
        sys.path.remove(str(ROOT / "packs" / "basics" / "src"))


def served(spec) -> dict:
    doc = json.loads(msgspec.json.encode(spec.descriptor))
    doc["source"] = "builtin"
    return doc


def test_input_nodes_match_the_contract_byte_for_byte(basics):
    contract = json.loads((DATA / "contract_input_descriptors.json").read_text())
    for expected in contract:
        got = served(basics[expected["type"]])
        ours = {k: got.pop(k) for k in ("version", "paramsSchema")}
        assert got == expected
        assert list(got) == list(expected), "key order is the reference's"
        assert ours["version"] == "1.0.0"


def test_basics_descriptors_match_golden(basics):
    golden = json.loads((DATA / "golden_basics_descriptors.json").read_text())
    assert [served(basics[t]) for t in golden] == list(golden.values())


def test_image_input_accepts_both_asset_reference_forms(basics):
    spec = basics["input/image"]
    schema = spec.descriptor.params_schema
    assert "asset" in schema["properties"]
    assert spec.descriptor.params == ()  # undeclared for clients, as in the contract
    p = spec.decode_params({"asset": {"ref": "asset", "id": "sha256-" + "0" * 64}})
    assert p.asset.id.startswith("sha256-")
    p = spec.decode_params({"asset": {"ref": "path", "path": "/x.png"}})
    assert p.asset.path == "/x.png"
    with pytest.raises(ParamsInvalid) as err:
        spec.decode_params({"asset": {"ref": "url", "url": "http://x"}})
    assert err.value.issues[0].path == "$.asset.ref"


def test_param_validation_errors_carry_json_paths(basics):
    resize = basics["image/resize"]
    with pytest.raises(ParamsInvalid) as err:
        resize.decode_params({"width": 9000})
    issue = err.value.issues[0]
    assert issue.path == "$.width"
    assert "<= 8192" in issue.message
    with pytest.raises(ParamsInvalid) as err:
        resize.decode_params({"height": "tall"})
    assert err.value.issues[0].path == "$.height"
    assert resize.decode_params({}).width == 512  # defaults fill in
    assert resize.decode_params({"unknown": 1}).height == 512  # undeclared keys are accepted


def test_param_kinds_widgets_and_options_are_derived():
    @node("acme/all", title="All", category="Test", output_kind="image")
    def all_params(
        ctx: Context,
        image: Annotated[Image, Port("Image")],
        refs: Annotated[list[Image], Port("Refs")],
        clip: Video | None = None,
        *,
        prompt: Annotated[str, Param("Prompt", widget="textarea")] = "",
        steps: Annotated[int, Param("Steps", min=1, max=50, step=1)] = 8,
        flag: Annotated[bool, Param("Flag", advanced=True)] = False,
        sampler: Annotated[Literal["euler", "heun"], Param("Sampler")] = "euler",
        seed: Annotated[int, Param("Seed", widget="seed")] = -1,
        model: Annotated[str, Param("Model", options_from="diffusion_models")] = "",
    ) -> Annotated[Image, Output("image", "Image")]:
        return image

    d = all_params.descriptor
    assert [(p.id, p.kind, p.required) for p in d.inputs] == [
        ("image", "image", True),
        ("refs", "image[]", True),
        ("clip", "video", False),
    ]
    kinds = {p.key: (p.widget, p.kind) for p in d.params}
    assert kinds == {
        "prompt": ("textarea", "text"),
        "steps": ("number", "number"),
        "flag": ("boolean", "boolean"),
        "sampler": ("select", "enum"),
        "seed": ("seed", "seed"),
        "model": ("select", "model"),
    }
    sampler = next(p for p in d.params if p.key == "sampler")
    assert [o.value for o in sampler.options] == ["euler", "heun"]
    encoded = json.loads(msgspec.json.encode(d))
    flag = next(p for p in encoded["params"] if p["key"] == "flag")
    assert flag == {
        "key": "flag",
        "label": "Flag",
        "widget": "boolean",
        "default": False,
        "advanced": True,
        "kind": "boolean",
    }
    assert d.params_schema["properties"]["steps"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 50,
        "default": 8,
    }


class Clip(NamedTuple):
    video: Annotated[Video, Output(label="Video")]
    caption: str


def test_multiple_outputs_from_a_named_tuple():
    @node("acme/clip", title="Clip", category="Test", output_kind="video")
    def clip(ctx: Context) -> Clip:
        return Clip(Video(b"v"), "c")

    assert [(o.id, o.label, o.kind) for o in clip.descriptor.outputs] == [
        ("video", "Video", "video"),
        ("caption", "Caption", "text"),
    ]
    assert clip.split_outputs(Clip(Video(b"v"), "c"))["caption"] == "c"


def test_class_nodes_keep_one_instance():
    @node("acme/counter", title="Counter", category="Test")
    class Counter:
        def __init__(self) -> None:
            self.calls = 0

        def run(
            self, ctx: Context, *, step: Annotated[int, Param("Step")] = 1
        ) -> Annotated[str, Output("text", "Text")]:
            self.calls += step
            return str(self.calls)

    params = Counter.decode_params({"step": 2})
    assert Counter.invoke(None, {}, params) == {"text": "2"}
    assert Counter.invoke(None, {}, params) == {"text": "4"}


def test_declaration_problems_are_all_reported_at_once():
    with pytest.raises(NodeDeclarationError) as err:

        @node("Bad Id", title="x", category="x", version="one", output_kind="hologram")
        def broken(
            ctx: Context,
            thing: object,
            *,
            n: int,
            w: Annotated[str, Param("W", widget="dial")] = "",
        ) -> str:
            return ""

    text = str(err.value)
    for fragment in (
        "type id must match",
        "not semver",
        "output_kind",
        "input 'thing'",
        "param 'n' needs a default",
        "unknown widget 'dial'",
        "return annotation",
    ):
        assert fragment in text, fragment
    assert len(err.value.problems) == 7


def test_invalid_default_is_a_declaration_error():
    with pytest.raises(NodeDeclarationError, match="default of param 'w' is invalid"):

        @node("acme/w", title="W", category="x")
        def w(ctx: Context, *, w: Annotated[int, Param("W", min=1)] = 0) -> None:
            return None
