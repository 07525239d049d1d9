"""Node types for the kernel's tests, declared with the real SDK decorator, and graph builders."""

from __future__ import annotations

from typing import Annotated, Any, Literal, NamedTuple

import msgspec
from inline_core import DictCatalog, NodeEntry
from inline_sdk import Context, Image, NodeSpec, Output, Param, Port, node


@node("input/text", title="Text", category="Input")
def input_text(
    ctx: Context,
    *,
    text: Annotated[str, Param("Text", widget="textarea")] = "",
    # Hidden from clients; lets the planning tests hash nested values.
    extra: Annotated[dict[str, Any] | list[Any] | None, Param("Extra", internal=True)] = None,
) -> Annotated[str, Output("text", "Text")]:
    return text


@node("input/image", title="Image", category="Input")
def input_image(
    ctx: Context, *, asset: Annotated[dict[str, Any] | None, Param("Asset", internal=True)] = None
) -> Annotated[Image, Output("image", "Image")]:
    raise NotImplementedError


@node("text/join", title="Join Text", category="Text")
def join(
    ctx: Context,
    a: Annotated[str, Port("A")],
    b: Annotated[str, Port("B")],
    *,
    separator: Annotated[str, Param("Separator")] = " ",
) -> Annotated[str, Output("text", "Text")]:
    return a + separator + b


@node("test/generate", title="Generate", category="Test", output_kind="image", version="1.2.0")
def generate(
    ctx: Context,
    prompt: Annotated[str, Port("Prompt")],
    image: Annotated[list[Image] | None, Port("Reference images")] = None,
    *,
    width: Annotated[int, Param("Width", min=64, max=8192)] = 1024,
    steps: Annotated[int, Param("Steps", min=1, max=100)] = 4,
    seed: Annotated[int, Param("Seed", widget="seed")] = -1,
    sampler: Annotated[Literal["euler", "heun"], Param("Sampler")] = "euler",
) -> Annotated[Image, Output("image", "Image")]:
    raise NotImplementedError


@node("load/model", title="Load Model", category="Loaders")
def load_model(
    ctx: Context, *, name: Annotated[str, Param("Model")] = "model.safetensors"
) -> Annotated[Any, Output("model", "Model", kind="model")]:
    raise NotImplementedError


@node("load/text-encoder", title="Load Text Encoder", category="Loaders")
def load_text_encoder(
    ctx: Context,
) -> Annotated[Any, Output("text_encoder", "Text encoder", kind="text-encoder")]:
    raise NotImplementedError


class Encoded(NamedTuple):
    conditioning: Annotated[Any, Output(kind="conditioning")]
    pooled: Annotated[Any, Output(kind="conditioning")]


@node("encode/text", title="Encode Text", category="Conditioning")
def encode_text(
    ctx: Context,
    text_encoder: Annotated[Any, Port("Text encoder", kind="text-encoder")],
    text: Annotated[str, Port("Text")],
) -> Encoded:
    raise NotImplementedError


@node("sample", title="Sample", category="Sampling")
def sample(
    ctx: Context,
    model: Annotated[Any, Port("Model", kind="model")],
    *,
    seed: Annotated[int, Param("Seed", widget="seed")] = 0,
) -> Annotated[Any, Output("latent", "Latent", kind="latent")]:
    raise NotImplementedError


@node("other/sample", title="Other Sample", category="Sampling")
def other_sample(
    ctx: Context, model: Annotated[Any, Port("Model", kind="model")]
) -> Annotated[Any, Output("latent", "Latent", kind="latent")]:
    raise NotImplementedError


class Lora(msgspec.Struct, tag="lora"):
    name: str
    strength: Annotated[float, msgspec.Meta(ge=0, le=2)] = 1.0


class Embedding(msgspec.Struct, tag="embedding"):
    name: str


@node("test/styled", title="Styled", category="Test")
def styled(
    ctx: Context,
    *,
    extras: Annotated[tuple[Lora | Embedding, ...], Param("Extras", widget="text")] = (),
    scale: Annotated[float, Param("Scale", min=0, max=1)] = 0.5,
    limit: Annotated[int | None, Param("Limit", widget="number")] = None,
    flag: Annotated[bool, Param("Flag")] = False,
) -> Annotated[str, Output("text", "Text")]:
    raise NotImplementedError


@node("test/stepped", title="Stepped", category="Test")
def stepped(
    ctx: Context,
    *,
    width: Annotated[int, Param("Width", min=256, max=2048, step=64)] = 1024,
    denoise: Annotated[float, Param("Denoise", min=0.0, max=1.0, step=0.05)] = 1.0,
) -> Annotated[str, Output("text", "Text")]:
    raise NotImplementedError


PACKS: dict[str, tuple[str, list[NodeSpec]]] = {
    "basics": ("0.3.0", [input_text, input_image, join]),
    "gen": ("2.0.0", [generate, styled, stepped]),
    "primitives": ("1.0.0", [load_model, load_text_encoder, encode_text, sample]),
    "other": ("1.0.0", [other_sample]),
}


def entries(pack_versions: dict[str, str] | None = None) -> list[NodeEntry]:
    """One entry per test node type (pack versions overridable per pack)."""
    out = []
    for pack, (version, specs) in PACKS.items():
        version = (pack_versions or {}).get(pack, version)
        out += [NodeEntry(spec.descriptor, pack, version) for spec in specs]
    return out


def catalog(pack_versions: dict[str, str] | None = None) -> DictCatalog:
    """A catalog of the test node types."""
    return DictCatalog(entries(pack_versions))


def edge(source: str, output: str) -> dict[str, str]:
    return {"from": source, "output": output}


def text_to_image(
    *,
    text: str = "a lighthouse",
    width: int = 1024,
    seed: int = 7,
    ids: tuple[str, str] = ("p", "g"),
) -> dict[str, Any]:
    """A two-node graph: input/text -> test/generate."""
    p, g = ids
    return {
        "schemaVersion": 1,
        "nodes": [
            {"id": p, "type": "input/text", "params": {"text": text}},
            {
                "id": g,
                "type": "test/generate",
                "params": {"width": width, "seed": seed},
                "inputs": {"prompt": edge(p, "text")},
            },
        ],
    }
