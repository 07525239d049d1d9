"""``text/embed``: any transformers or sentence-transformers encoder of ``models/embeddings/``
(a ``TextEmbedding``: the SDK declares its ``text`` input, its ``texts`` param and its outputs).

Concurrent calls of this worker on the same model are gathered into one batch
(``inline_sdk.batch``): the node takes ``CONCURRENCY`` calls at once, and while the encoder
runs one batch the calls that arrive wait and go through together in the next, their texts
tokenized and sorted by length with the others' (``_pool``; the batch runs one at a time, so
the tokenizer is never used from two threads). Each call gets its own vectors back, equal to
its texts embedded alone (to float rounding), then its own normalisation and ``dimensions``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal

from inline_sdk import Cancelled, Context, Param
from inline_sdk.batch import BatchStats, Gatherer, Job
from inline_sdk.embed import DimensionsRefused, Embeddings, EmbeddingUsage, TextEmbedding

from ._encoder import POOLING_CHOICES, find_encoder, read_encoder
from ._load import load
from ._pool import Encoder, finish, make_encoder, vectors

#: Calls the host sends this node at once (the most one batch gathers).
CONCURRENCY: Final = 16
Pooling = Literal["auto", "mean", "cls", "last"]


class _Request:
    """One call's texts, under the pooling it asked for."""

    def __init__(self, texts: list[str], modes: tuple[str, ...], ctx: Context) -> None:
        self.texts, self.modes, self.ctx = texts, modes, ctx


@dataclass(frozen=True, eq=False)
class _Held:
    """The encoder this worker keeps, and the batcher of its calls."""

    encoder: Encoder
    gatherer: Gatherer[_Request]


def _gatherer(encoder: Encoder, ctx: Context) -> Gatherer[_Request]:
    stats = ctx.stats

    def alone(request: _Request) -> Any:
        if request.ctx.cancelled:
            raise Cancelled()
        return vectors(encoder, request.texts, request.modes)

    def run_batch(jobs: list[Job[_Request]]) -> None:
        live = [j for j in jobs if not j.request.ctx.cancelled]
        for job in jobs:
            if job not in live:
                job.fail(Cancelled())
        if not live:
            return
        every = [text for job in live for text in job.request.texts]
        pooled, tokens = vectors(encoder, every, live[0].request.modes)
        row = 0
        for job in live:
            n = len(job.request.texts)
            job.succeed((pooled[row : row + n], tokens[row : row + n]))
            row += n

    def report(s: BatchStats) -> None:
        stats.update("embedBatching", {**s.as_dict(), "maxBatch": CONCURRENCY})

    return Gatherer(
        run_batch,
        alone,
        key=lambda r: r.modes,
        limit=lambda _r: CONCURRENCY,
        on_batch=report,
    )


class Embed(
    TextEmbedding,
    type="text/embed",
    title="Embed (encoder)",
    category="Text",
    icon="hash",
    concurrency=CONCURRENCY,
):
    """The vectors of texts, from an encoder folder of ``models/embeddings/``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: _Held | None = None

    def embed(
        self,
        ctx: Context,
        texts: list[str],
        *,
        model: Annotated[
            str,
            Param("Model", widget="select", options_from="embeddings", architecture="encoder"),
        ] = "",
        normalize: Annotated[
            bool, Param("Normalize (always when the model's config has a Normalize module)")
        ] = False,
        pooling: Annotated[
            Pooling,
            Param(
                "Pooling",
                options=[
                    ("auto", "The model's (mean without a config)"),
                    ("mean", "Mean"),
                    ("cls", "First token (CLS)"),
                    ("last", "Last token"),
                ],
                advanced=True,
            ),
        ] = "auto",
        dimensions: Annotated[int, Param("Dimensions (0 = all)", min=0, advanced=True)] = 0,
    ) -> Embeddings:
        ctx.phase("loading", "Loading model…")
        held = self._load(ctx, model)
        encoder = held.encoder
        if encoder.width and dimensions > encoder.width:  # known from an earlier batch
            raise DimensionsRefused(dimensions, encoder.width, encoder.config.folder.name)
        modes = encoder.config.pooling if pooling == "auto" else POOLING_CHOICES[pooling]
        ctx.phase("encode", f"Embedding {len(texts)} text(s)…")
        pooled, tokens = held.gatherer.submit(_Request(texts, modes, ctx))
        ctx.check_cancelled()
        width = int(pooled.shape[-1])
        if dimensions > width:
            raise DimensionsRefused(dimensions, width, encoder.config.folder.name)
        vectors_ = finish(pooled, dimensions, normalize or encoder.config.normalize)
        return Embeddings(vectors=vectors_, usage=EmbeddingUsage(prompt_tokens=sum(tokens)))

    def _load(self, ctx: Context, model: str) -> _Held:
        """The encoder of ``model`` and its batcher (made again when another model, or a new
        load, replaced the one kept). One call at a time: the first calls of a worker arrive
        together, and importing transformers from several threads at once fails."""
        folder = find_encoder(ctx.models_dir, model)
        config = read_encoder(folder)
        with self._lock:
            loaded = load(ctx.memory, folder, "encoder", config.weights)
            held = self._held
            if held is None or held.encoder.loaded is not loaded or held.encoder.config != config:
                encoder = make_encoder(loaded, config)
                held = self._held = _Held(encoder, _gatherer(encoder, ctx))
            return held
