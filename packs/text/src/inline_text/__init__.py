"""The text pack: ``text/complete`` (any causal LM; ``text/complete-n``, hidden, batches the
``n`` choices of one request), ``text/rewrite`` (any seq2seq LM) and
``text/embed`` (any encoder of ``models/embeddings/``)."""

from inline_sdk import NodeSpec, hookimpl

from ._card import Bucket, Budget, CardInvalid, ModelCard, bucket, budget, cache_length, read_card
from ._complete import Complete, CompleteN, build_messages, normalize_tools
from ._count import CountTokens
from ._embed import Embed
from ._encoder import EncoderConfig, EncoderInvalid, find_encoder, read_encoder
from ._load import ModelNotFound, find_model
from ._parse import ReplyParser, ToolCall, parse_call
from ._rewrite import Rewrite

__all__ = (
    "Bucket",
    "Budget",
    "CardInvalid",
    "Complete",
    "CompleteN",
    "Embed",
    "EncoderConfig",
    "EncoderInvalid",
    "ModelCard",
    "ModelNotFound",
    "ReplyParser",
    "Rewrite",
    "ToolCall",
    "bucket",
    "budget",
    "build_messages",
    "cache_length",
    "find_encoder",
    "find_model",
    "inline_nodes",
    "normalize_tools",
    "parse_call",
    "read_card",
    "read_encoder",
)


@hookimpl
def inline_nodes() -> list[NodeSpec]:
    """The nodes of this pack."""
    return [Complete.spec, CompleteN.spec, Rewrite, Embed.spec, CountTokens]
