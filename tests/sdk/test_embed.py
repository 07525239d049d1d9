"""The text-embedding base (typed ``Embeddings``, their JSON values read back with one decoder),
the ``encoder`` architecture of an ``embeddings`` picker, and the batching helper it uses."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Annotated

import msgspec
import pytest
from inline_sdk import Context, NodeDeclarationError, Param, is_encoder_folder, node
from inline_sdk.batch import Gatherer, Job
from inline_sdk.chat import is_chat_node
from inline_sdk.embed import (
    EMBED_PARAMS,
    DimensionsRefused,
    Embeddings,
    EmbeddingUsage,
    TextEmbedding,
    is_embedding_node,
    read_embeddings,
)


class Lengths(TextEmbedding, type="acme/lengths", title="Lengths", concurrency=4):
    """Each text's length and its count of 'a's (two values), cut to ``dimensions``."""

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
        if dimensions > 2:
            raise DimensionsRefused(dimensions, 2, model or "lengths")
        vectors = [[float(len(t)), float(t.count("a"))][: dimensions or 2] for t in texts]
        return Embeddings(vectors=vectors, usage=EmbeddingUsage(prompt_tokens=len(texts)))


def test_the_base_declares_the_embedding_shape() -> None:
    d = Lengths.spec.descriptor
    doc = json.loads(msgspec.json.encode(d))
    assert doc["outputKind"] == "text" and doc["concurrency"] == 4 and doc["category"] == "Text"
    assert doc["inputs"] == [{"id": "text", "label": "Text", "kind": "text", "required": False}]
    assert [(o["id"], o["kind"]) for o in doc["outputs"]] == [
        ("embeddings", "text"),
        ("usage", "text"),
    ]
    assert [p["key"] for p in doc["params"]] == ["model", "dimensions"]  # texts: internal
    assert set(EMBED_PARAMS) <= set(doc["paramsSchema"]["properties"])
    assert is_embedding_node(d) and not is_chat_node(d)
    assert d.architecture("model") == "encoder"


def test_texts_then_text_give_vectors_read_back_with_one_decoder() -> None:
    spec = Lengths.spec
    out = spec.invoke(None, {"text": "banana"}, spec.decode_params({"texts": ["a", "bb"]}))
    assert json.loads(out["embeddings"]) == [[1.0, 1.0], [2.0, 0.0], [6.0, 3.0]]
    assert json.loads(out["usage"]) == {"prompt_tokens": 3}
    done = read_embeddings(out)
    assert done.vectors == [[1.0, 1.0], [2.0, 0.0], [6.0, 3.0]]
    assert done.usage == EmbeddingUsage(prompt_tokens=3)
    cut = spec.invoke(None, {}, spec.decode_params({"texts": ["aa"], "dimensions": 1}))
    assert json.loads(cut["embeddings"]) == [[2.0]]
    with pytest.raises(DimensionsRefused, match="dimensions=3 is more than the 2 values"):
        spec.invoke(None, {}, spec.decode_params({"texts": ["aa"], "dimensions": 3}))
    with pytest.raises(ValueError, match="needs a text"):
        spec.invoke(None, {}, spec.decode_params({}))
    with pytest.raises(msgspec.ValidationError):
        read_embeddings({"embeddings": '[["x"]]'})


def test_an_embedding_node_declares_its_params_and_returns_embeddings() -> None:
    with pytest.raises(NodeDeclarationError, match="must declare the params") as caught:

        class Bare(TextEmbedding, type="acme/bare-embed"):
            def embed(
                self, ctx: Context, texts: list[str], *, model: Annotated[str, Param("M")] = ""
            ) -> Embeddings:
                return Embeddings()

    assert "dimensions" in str(caught.value) and "'model'" not in str(caught.value)
    with pytest.raises(NodeDeclarationError, match="must not declare a param 'texts'"):

        class Twice(TextEmbedding, type="acme/twice"):
            def embed(  # type: ignore[override]
                self,
                ctx: Context,
                items: list[str],
                *,
                model: Annotated[str, Param("M")] = "",
                dimensions: Annotated[int, Param("D")] = 0,
                texts: Annotated[list[str], Param("T")] = [],  # noqa: B006
            ) -> Embeddings:
                return Embeddings()

    class Short(Lengths, type="acme/short"):  # one vector for any number of texts
        pass

    Short.embed = lambda self, ctx, texts, **p: Embeddings(vectors=[[1.0]])  # type: ignore[method-assign]
    with pytest.raises(TypeError, match="returned 1 vectors for 2 texts"):
        Short.spec.invoke(None, {}, Short.spec.decode_params({"texts": ["a", "b"]}))


def test_the_encoder_architecture_needs_an_embeddings_picker(tmp_path: Path) -> None:
    with pytest.raises(NodeDeclarationError, match="architecture='encoder'"):

        @node("acme/bad-encoder", title="Bad", category="Text")
        def bad(
            ctx: Context,
            *,
            a: Annotated[str, Param("A", options_from="llm", architecture="encoder")] = "",
        ) -> None:
            return None

    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text("{}")
    st = tmp_path / "st"
    (st / "0_Transformer").mkdir(parents=True)
    (st / "0_Transformer" / "config.json").write_text("{}")
    modules = [{"path": "0_Transformer", "type": "sentence_transformers.models.Transformer"}]
    (st / "modules.json").write_text(json.dumps(modules))
    inversion = tmp_path / "easynegative.safetensors"
    inversion.write_bytes(b"")
    assert is_encoder_folder(plain) and is_encoder_folder(st)
    assert not is_encoder_folder(inversion) and not is_encoder_folder(tmp_path / "gone")


def test_the_gatherer_batches_calls_that_arrive_while_one_runs() -> None:
    started, release = threading.Event(), threading.Event()
    sizes: list[int] = []

    def run_batch(jobs: list[Job[int]]) -> None:
        sizes.append(len(jobs))
        for job in jobs:
            job.succeed(job.request * 10)

    def alone(request: int) -> int:
        started.set()
        release.wait(10)
        sizes.append(1)
        return request * 10

    gatherer: Gatherer[int] = Gatherer(run_batch, alone, key=lambda _r: 0, limit=lambda _r: 8)
    results: dict[int, int] = {}
    first = threading.Thread(target=lambda: results.update({0: gatherer.submit(0)}))
    first.start()
    started.wait(10)
    others = [
        threading.Thread(target=lambda i=i: results.update({i: gatherer.submit(i)}))
        for i in range(1, 4)
    ]
    for t in others:
        t.start()
    while sum(len(v) for v in gatherer._pending.values()) < 3:  # all three are waiting
        threading.Event().wait(0.01)
    release.set()
    for t in [first, *others]:
        t.join(10)
    assert results == {0: 0, 1: 10, 2: 20, 3: 30}
    assert sizes == [1, 3] and gatherer.stats.largest == 3
