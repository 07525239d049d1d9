"""``/openai/v1/embeddings`` without a pack: the body checked field by field, the answer in
OpenAI's shape (base64 as little-endian float32), the embedding nodes found by their shape, and
the ``embeddings`` picker that lists encoder folders only (the real node: tests/text)."""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path
from typing import Annotated

import msgspec
import pytest
from inline_host.api._models import EmbeddingModel, embedding_nodes
from inline_host.api.openai._embeddings import answer, parse, run_request
from inline_host.api.openai._schemas import OpenAIError
from inline_host.models import ModelCatalogs, encoder_entries, narrow
from inline_sdk import Context, Output, Param, Port, node
from inline_sdk.embed import Embeddings, EmbeddingUsage, TextEmbedding, embedding_outputs


class Constant(TextEmbedding, type="acme/constant", title="Constant"):
    def embed(
        self,
        ctx: Context,
        texts: list[str],
        *,
        model: Annotated[
            str,
            Param("Model", widget="select", options_from="embeddings", architecture="encoder"),
        ] = "",
        dimensions: Annotated[int, Param("Dimensions", min=0)] = 0,
    ) -> Embeddings:
        return Embeddings(vectors=[[1.0] for _ in texts])


def test_the_body_is_checked_naming_the_field() -> None:
    req, texts = parse(b'{"model": "m", "input": "one", "user": "u"}')
    assert texts == ["one"] and req.encoding_format == "float" and req.dimensions is None
    assert parse(b'{"model": "m", "input": ["a", "b"], "dimensions": 8}')[1] == ["a", "b"]
    cases = {
        b'{"model": "m", "input": [[1, 2]]}': ("input", "token arrays"),
        b'{"model": "m", "input": [1, 2]}': ("input", "token arrays"),
        b'{"model": "m", "input": []}': ("input", "non-empty"),
        b'{"model": "m", "input": ["a", ""]}': ("input", "input[1] is empty"),
        b'{"model": "m", "input": ["a", 3]}': ("input", "input[1] must be a string"),
        b'{"model": "m", "input": "a", "encoding_format": "int8"}': ("encoding_format", "int8"),
        b'{"model": "m", "input": "a", "dimensions": 0}': ("dimensions", "at least 1"),
        b'{"model": "m", "input": "a", "dimensions": "8"}': ("dimensions", "int"),
        b'{"input": "a"}': (None, "model"),
    }
    for body, (param, words) in cases.items():
        with pytest.raises(OpenAIError) as caught:
            parse(body)
        assert caught.value.status == 400 and caught.value.param == param, body
        assert words in caught.value.message, (body, caught.value.message)
    with pytest.raises(OpenAIError, match="at most 2048"):
        parse(json.dumps({"model": "m", "input": ["x"] * 2049}).encode())


def test_the_answer_is_openais_shape_and_base64_is_float32() -> None:
    vectors = [[0.5, -1.25, 3.0], [0.1, 0.2, 0.3]]
    done = Embeddings(vectors=vectors, usage=EmbeddingUsage(prompt_tokens=7))
    outputs = embedding_outputs(done)._asdict()
    body = json.loads(msgspec.json.encode(answer(outputs, "m", "float")))
    assert list(body) == ["object", "data", "model", "usage"]
    assert body["object"] == "list" and body["model"] == "m"
    assert body["data"][1] == {"object": "embedding", "index": 1, "embedding": [0.1, 0.2, 0.3]}
    assert body["usage"] == {"prompt_tokens": 7, "total_tokens": 7}
    packed = json.loads(msgspec.json.encode(answer(outputs, "m", "base64")))
    raw = base64.b64decode(packed["data"][0]["embedding"])
    assert struct.unpack("<3f", raw) == (0.5, -1.25, 3.0)


def test_the_run_is_one_node_of_the_embedding_shape() -> None:
    @node("acme/echo-text", title="Echo", category="Text", output_kind="text")
    def echo(
        ctx: Context,
        text: Annotated[str | None, Port("Text")] = None,
        *,
        model: Annotated[str, Param("Model", options_from="embeddings")] = "",
    ) -> Annotated[str, Output("embeddings", "Embeddings")]:
        return ""

    found = embedding_nodes([echo.descriptor, Constant.spec.descriptor])
    assert found == ("acme/constant",)  # a text in and an output named so is not the shape
    doc = run_request(EmbeddingModel("enc", "acme/constant"), ["a", "b"], None)
    (one,) = doc["graph"]["nodes"]
    assert one["type"] == "acme/constant" and doc["target"] == one["id"]
    assert one["params"] == {"model": "enc", "texts": ["a", "b"], "dimensions": 0}


def test_the_encoder_picker_lists_encoder_folders_only(tmp_path: Path) -> None:
    root = tmp_path / "embeddings"
    (root / "minilm").mkdir(parents=True)
    (root / "minilm" / "config.json").write_text("{}")
    (root / "minilm" / "model.safetensors").write_bytes(b"")
    (root / "easynegative.safetensors").write_bytes(b"")  # a ComfyUI textual inversion
    catalogs = ModelCatalogs([tmp_path])
    assert catalogs.entries("embeddings") == ("easynegative.safetensors", "minilm")
    assert encoder_entries(catalogs) == ("minilm",)
    names = catalogs.entries("embeddings")
    assert list(narrow("embeddings", "encoder", names, catalogs)) == ["minilm"]
    assert narrow("embeddings", None, names, catalogs) == names  # a picker declaring none
