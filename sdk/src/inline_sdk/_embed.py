"""``TextEmbedding``: the base of text-embedding nodes (torch-free; a model imports its own).

A subclass names its node in the class statement and implements ``embed``, which returns typed
``Embeddings``, one vector per text; ``embed``'s keyword-only arguments are the node's params,
declared as on any node, and include the params an embeddings request sets (``EMBED_PARAMS``)::

    class Lengths(TextEmbedding, type="acme/lengths", title="Lengths"):
        def embed(self, ctx, texts, *, model: Annotated[str, Param("Model")] = "",
                  dimensions: Annotated[int, Param("Dimensions", min=0)] = 0):
            return Embeddings(vectors=[[float(len(t))] for t in texts],
                              usage=EmbeddingUsage(prompt_tokens=len(texts)))

The base declares the rest: the input ``text`` (one text) and the param ``texts`` (a list, not
shown in the node's form), which ``embed`` receives joined (``texts``, then ``text``), and the
outputs every embeddings client reads: ``embeddings`` (a JSON list of vectors, in the order of
the texts) and ``usage`` (``{prompt_tokens}``), both JSON values written with one encoder (their
ports carry the JSON as text, so each is a take like any text output) and read back by the host
with ``read_embeddings``, one decoder of the same types.

``dimensions`` (0: the model's own) asks for shorter vectors: the node keeps their first
``dimensions`` values, normalised again when the model's vectors are normalised, and raises
``DimensionsRefused`` (a user's mistake, as the host reports it) for more than the model gives.

A node whose descriptor has this shape is an embedding node (``is_embedding_node``): the host
finds embedding models by it, never by node id, in the folders its ``model`` picker lists
(``options_from="embeddings", architecture="encoder"``).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Annotated, Any, Final, NamedTuple

import msgspec

from ._bases import POSITIONAL, NodeBase, declare_run, keyword_params
from ._context import Context
from ._declare import Output, Param, Port
from ._descriptor import Descriptor
from ._errors import NodeDeclarationError

#: The params an embeddings request sets, which every embedding node declares.
EMBED_PARAMS: Final = ("model", "texts", "dimensions")
#: The outputs of an embedding node.
EMBED_OUTPUTS: Final = ("embeddings", "usage")
TEXT_PORT = Annotated[str | None, Port("Text")]
TEXTS_PARAM = Annotated[list[str], Param("Texts", internal=True)]


class EmbeddingUsage(msgspec.Struct, frozen=True):
    """Tokens the model read for one call (every text, as it was cut to the model's length)."""

    prompt_tokens: int = 0


class Embeddings(msgspec.Struct, frozen=True, kw_only=True):
    """What an embedding node answered: one vector per text, in their order."""

    vectors: list[list[float]] = msgspec.field(default_factory=list)
    usage: EmbeddingUsage = msgspec.field(default_factory=EmbeddingUsage)


class DimensionsRefused(ValueError):
    """Raised when ``dimensions`` asks for more values than the model's vectors have."""

    def __init__(self, asked: int, size: int, model: str) -> None:
        super().__init__(
            f"dimensions={asked} is more than the {size} values of {model}'s vectors "
            f"(ask for 1 to {size}, or 0 for all of them)"
        )
        self.asked, self.size, self.model = asked, size, model


class EmbeddingOutputs(NamedTuple):
    """The output ports of an embedding node (the JSON values as their text)."""

    embeddings: Annotated[str, Output(label="Embeddings (JSON)")]
    usage: Annotated[str, Output(label="Usage (JSON)")]


_encoder = msgspec.json.Encoder()
_vectors = msgspec.json.Decoder(list[list[float]])
_usage = msgspec.json.Decoder(EmbeddingUsage)


def embedding_outputs(done: Embeddings) -> EmbeddingOutputs:
    """``done`` as an embedding node's output values."""
    return EmbeddingOutputs(
        embeddings=_encoder.encode(done.vectors).decode(),
        usage=_encoder.encode(done.usage).decode(),
    )


def read_embeddings(outputs: Mapping[str, str]) -> Embeddings:
    """An embedding node's outputs (each port's text, as its takes hold it) as ``Embeddings``;
    raises ``msgspec.DecodeError`` when they are not the declared JSON."""
    return Embeddings(
        vectors=_vectors.decode(outputs.get("embeddings") or "[]"),
        usage=_usage.decode(outputs.get("usage") or "{}"),
    )


def is_embedding_node(descriptor: Descriptor) -> bool:
    """Whether ``descriptor`` has the embedding contract's shape: a ``text`` text input, the
    ``EMBED_OUTPUTS`` as text, the ``EMBED_PARAMS`` in its schema (what ``TextEmbedding``
    declares; a node declared by hand with the same shape is one too)."""
    text = descriptor.input("text")
    if text is None or text.kind != "text":
        return False
    for port_id in EMBED_OUTPUTS:
        port = descriptor.output(port_id)
        if port is None or port.kind != "text":
            return False
    properties = descriptor.params_schema.get("properties")
    return isinstance(properties, dict) and all(k in properties for k in EMBED_PARAMS)


def joined_texts(texts: list[str], text: str | None) -> list[str]:
    """The texts one call embeds: ``texts``, then ``text`` (the input) when it is set."""
    return [*texts, text] if text is not None else list(texts)


class TextEmbedding(NodeBase):
    """Base of text-embedding nodes (see the module docstring). ``spec`` is the declared node
    (return it from ``inline_nodes``); one instance per worker keeps what it loaded."""

    _output_kind = "text"
    _category = "Text"
    _icon = "hash"

    @classmethod
    def _declare(cls, node_type: str) -> Any:
        return _make_run(cls, node_type)

    def embed(self, ctx: Context, texts: list[str], **params: Any) -> Embeddings:
        """One vector per text of ``texts`` (never empty), in their order."""
        raise NotImplementedError(f"{type(self).__name__} must implement embed")


def _make_run(cls: type[TextEmbedding], node_type: str) -> Any:
    """A ``run(self, ctx, text, *, texts, <embed's params>)`` for ``build_spec`` to declare."""
    where = f"node '{node_type}'"
    params = keyword_params(cls, TextEmbedding, "embed", node_type, "self, ctx, texts")
    names = {p.name for p in params}
    if "texts" in names:
        raise NodeDeclarationError(
            [f"{where}: embed(self, ctx, texts, *, ...) must not declare a param 'texts' (the "
             "base declares it, and passes the texts as embed's argument)"]
        )  # fmt: skip
    missing = [k for k in EMBED_PARAMS if k != "texts" and k not in names]
    if missing:
        raise NodeDeclarationError(
            [f"{where}: embed(self, ctx, texts, *, ...) must declare the params {missing} (an "
             "embeddings request sets them)"]
        )  # fmt: skip

    def run(
        self: TextEmbedding,
        ctx: Context,
        text: str | None = None,
        *,
        texts: list[str],
        **values: Any,
    ) -> EmbeddingOutputs:
        every = joined_texts(texts, text)
        if not every:
            raise ValueError(f"{node_type} needs a text (the input) or texts (a param)")
        done = self.embed(ctx, every, **values)
        if not isinstance(done, Embeddings):
            raise TypeError(f"{node_type}: embed returned {type(done).__name__}, not Embeddings")
        if len(done.vectors) != len(every):
            raise TypeError(
                f"{node_type}: embed returned {len(done.vectors)} vectors for {len(every)} texts"
            )
        asked = values.get("dimensions") or 0
        if asked and any(len(v) != asked for v in done.vectors):
            raise TypeError(f"{node_type}: embed returned vectors not of dimensions={asked}")
        return embedding_outputs(done)

    head = [inspect.Parameter("text", POSITIONAL, default=None, annotation=TEXT_PORT)]
    texts = inspect.Parameter(
        "texts", inspect.Parameter.KEYWORD_ONLY, default=[], annotation=TEXTS_PARAM
    )
    return declare_run(cls, run, head, [texts, *params], EmbeddingOutputs)
