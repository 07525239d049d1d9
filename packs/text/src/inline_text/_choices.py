"""The ``n`` choices of one chat request in one batched ``generate`` (``text/complete-n``).

The host sends a request's ``n`` choices as ``n`` runs of ``text/complete-n``, each with its own
seed and ``choices=n``. The worker gathers the calls whose rows can share a batch (the same
model, prompt and settings: only the seed differs) for up to ``WINDOW_S`` (less once all ``n``
are in) and decodes them as one batch of rows (``inline_sdk.batch.Gatherer``). Each row keeps
what is its own: its logits processors (log-probabilities, penalties, grammar), its stop (a stop
string, a cancel), its stream, and its sampling: temperature and top-p are applied and the token
drawn per row from the row's own seeded generator (``RowSampler``), so a choice's reply depends on
its seed alone, never on which rows shared its batch. ``generate`` itself then decodes greedily.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Final

from inline_sdk import Context
from inline_sdk.batch import BatchStats, Gatherer, Job

from ._generate import end_ids, generate_lock, generation_config
from ._load import Loaded

#: Seconds a batch's first call waits, at most, for the other choices of its request (it goes
#: as soon as all are in; only a choice that never comes, a cache hit, costs the whole wait).
WINDOW_S: Final = 3.0
CACHE_KEY: Final = "inline_text.choices"


@dataclass(eq=False)
class Row:
    """One choice: its prompt, settings, and what is its own while the batch decodes."""

    loaded: Loaded
    ids: list[int]
    #: What rows sharing a batch have in common (model, prompt, every setting but the seed).
    key: Hashable
    choices: int
    max_new_tokens: int
    cache_length: int
    #: The row's logits processors, the sampler last (made once, at the batch's start).
    processors: Callable[[], list[Any]]
    on_token: Callable[[int], None]
    #: Whether the row is done early (a stop string matched, the call was cancelled).
    stop: Callable[[], bool]


class RowSampler:
    """Draws one row's next token from its own generator (temperature, the model's top-k, then
    top-p, as transformers' sampling does) and leaves only that token possible; temperature 0
    leaves the logits to greedy decoding. Every sampled reply of ``text/complete`` is drawn so,
    batched or not: a reply is its seed's, whichever rows shared its batch."""

    def __init__(
        self, temperature: float, top_p: float, seed: int, device: str, top_k: int = 0
    ) -> None:
        import torch

        self.temperature, self.top_p, self.top_k = temperature, top_p, top_k
        self.generator = torch.Generator(device=device)
        if seed >= 0:
            self.generator.manual_seed(seed)
        else:
            self.generator.seed()

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        if self.temperature <= 0:
            return scores
        logits = scores.float() / self.temperature
        if 0 < self.top_k < logits.shape[-1]:
            kth = logits.topk(self.top_k, dim=-1).values[..., -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        probs = torch.softmax(logits, dim=-1)
        if self.top_p < 1.0:
            ordered, order = probs.sort(dim=-1, descending=True)
            ordered[(ordered.cumsum(dim=-1) - ordered) > self.top_p] = 0.0  # keeps the first
            probs = torch.zeros_like(probs).scatter_(-1, order, ordered)
        token = torch.multinomial(probs, 1, generator=self.generator)
        return torch.full_like(scores, float("-inf")).scatter_(-1, token, 0.0)


def sampler(loaded: Loaded, temperature: float, top_p: float, seed: int) -> RowSampler:
    """The sampler of one reply of ``loaded`` (its generation config's top-k applies)."""
    top_k = getattr(loaded.model.generation_config, "top_k", None) or 0
    return RowSampler(temperature, top_p, seed, str(loaded.device), int(top_k))


def choose(ctx: Context, row: Row) -> list[int]:
    """The tokens ``row`` generated, decoded in a batch with the rows of its request that
    arrive in time (its stream fed as they come)."""

    stats = ctx.stats

    def report(batches: BatchStats) -> None:
        stats.update("choicesBatching", batches.as_dict())

    def make() -> Gatherer[Row]:  # one per worker; its batches in health (choicesBatching)
        return Gatherer(_batch, _alone, key=lambda r: r.key, limit=lambda r: r.choices,
                        window_s=WINDOW_S, on_batch=report)  # fmt: skip

    gatherer: Gatherer[Row] = ctx.cache.get(CACHE_KEY, make)
    return gatherer.submit(row)


def _alone(row: Row) -> list[int]:
    return generate_rows([row])[0]


def _batch(jobs: list[Job[Row]]) -> None:
    for job, tokens in zip(jobs, generate_rows([j.request for j in jobs]), strict=True):
        job.succeed(tokens)


def generate_rows(rows: list[Row]) -> list[list[int]]:
    """One ``generate`` over ``rows`` (one prompt, repeated): each row's generated tokens, its
    end-of-sequence token included when it ended there."""
    import torch
    from transformers import (
        LogitsProcessor,
        LogitsProcessorList,
        StoppingCriteria,
        StoppingCriteriaList,
    )

    first = rows[0]
    loaded = first.loaded
    ends = end_ids(loaded)
    tokens: list[list[int]] = [[] for _ in rows]
    done = [False] * len(rows)
    per_row = [[p for p in r.processors() if p is not None] for r in rows]

    class Sink:  # transformers' streamer seam: each step's token of every row
        prompt = True

        def put(self, value: Any) -> None:
            if self.prompt:
                self.prompt = False
                return
            for i, token in enumerate(int(t) for t in value.reshape(-1).tolist()):
                if done[i]:
                    continue  # a finished row gets padding
                tokens[i].append(token)
                rows[i].on_token(token)
                done[i] = token in ends

        def end(self) -> None:
            pass

    class PerRow(LogitsProcessor):
        def __call__(self, input_ids: Any, scores: Any) -> Any:
            for i, processors in enumerate(per_row):
                if done[i]:
                    continue
                row = scores[i : i + 1]
                for p in processors:
                    row = p(input_ids[i : i + 1], row)
                scores[i : i + 1] = row
            return scores

    class Stop(StoppingCriteria):
        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            for i, row in enumerate(rows):
                done[i] = done[i] or row.stop()
            return torch.tensor(done, dtype=torch.bool, device=input_ids.device)

    config = generation_config(
        loaded, cache_length=first.cache_length, compile_=False,
        max_new_tokens=first.max_new_tokens, do_sample=False, num_beams=1,
    )  # fmt: skip
    ids = torch.tensor([first.ids] * len(rows), dtype=torch.long, device=loaded.device)
    with generate_lock(), torch.inference_mode():
        loaded.model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            generation_config=config,
            streamer=Sink(),
            stopping_criteria=StoppingCriteriaList([Stop()]),
            logits_processor=LogitsProcessorList([PerRow()]),
        )
    return tokens
