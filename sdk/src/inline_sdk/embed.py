"""Text embeddings: the ``TextEmbedding`` node base, its typed ``Embeddings`` (the vectors and
the usage as JSON values), and how the host recognizes and reads an embedding node
(torch-free)."""

from ._embed import (
    EMBED_OUTPUTS,
    EMBED_PARAMS,
    DimensionsRefused,
    EmbeddingOutputs,
    Embeddings,
    EmbeddingUsage,
    TextEmbedding,
    embedding_outputs,
    is_embedding_node,
    joined_texts,
    read_embeddings,
)

__all__ = (
    "EMBED_OUTPUTS",
    "EMBED_PARAMS",
    "DimensionsRefused",
    "EmbeddingOutputs",
    "EmbeddingUsage",
    "Embeddings",
    "TextEmbedding",
    "embedding_outputs",
    "is_embedding_node",
    "joined_texts",
    "read_embeddings",
)
