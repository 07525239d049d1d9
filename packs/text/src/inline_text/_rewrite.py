"""``text/rewrite``: any encoder-decoder LM (T5, BART, Marian...), padded to buckets."""

from __future__ import annotations

from typing import Annotated

from inline_sdk import Context, Output, Param, Port, node

from ._card import REWRITE_MAX, bucket
from ._generate import run_generate, sampling
from ._load import find_model, load


@node("text/rewrite", title="Rewrite (seq2seq)", category="Text", icon="edit", output_kind="text")
class Rewrite:
    """Rewrites ``text`` with a seq2seq model (summarize, translate, paraphrase...)."""

    def warm(self, ctx: Context, *, model: str) -> None:
        """Load the model the pick names (a deployment's warm-up)."""
        ctx.phase("loading", "Loading model…")
        load(ctx.memory, find_model(ctx.models_dir, model, "seq2seq"), "seq2seq")

    def run(
        self,
        ctx: Context,
        text: Annotated[str, Port("Text")],
        *,
        model: Annotated[
            str, Param("Model", widget="select", options_from="llm", architecture="seq2seq")
        ] = "",
        prefix: Annotated[str, Param("Task prefix (T5: 'summarize: ')")] = "",
        max_new_tokens: Annotated[int, Param("Max new tokens", min=1, max=REWRITE_MAX)] = 128,
        num_beams: Annotated[int, Param("Beams", min=1, max=16, advanced=True)] = 1,
        temperature: Annotated[
            float, Param("Temperature (0 = greedy)", min=0.0, max=2.0, step=0.05)
        ] = 0.0,
        seed: Annotated[int, Param("Seed (-1 = random)", widget="seed")] = -1,
    ) -> Annotated[str, Output("text", "Text")]:
        if not text or not text.strip():
            raise ValueError("text/rewrite needs a text (the input is empty)")
        ctx.phase("loading", "Loading model…")
        loaded = load(ctx.memory, find_model(ctx.models_dir, model, "seq2seq"), "seq2seq")
        tokenizer = loaded.tokenizer
        ids = tokenizer(prefix + text)["input_ids"]
        size = bucket(len(ids))
        if size.warning:
            ctx.log.warning("%s: %s", loaded.folder.name, size.warning)
            ids = ids[: size.kept]
        import torch

        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        padding = size.length - len(ids)
        inputs = {  # padded to the bucket, the padding masked: one capture per bucket
            "input_ids": torch.tensor([ids + [pad] * padding], dtype=torch.long),
            "attention_mask": torch.tensor([[1] * len(ids) + [0] * padding], dtype=torch.long),
        }
        ctx.phase("generate", "Rewriting…")
        out = run_generate(
            loaded,
            inputs,
            seed=seed,
            stop=lambda: ctx.cancelled,
            on_token=None,
            cache_length=REWRITE_MAX + 1,
            max_new_tokens=min(max_new_tokens, REWRITE_MAX),
            **sampling(temperature, 1.0, num_beams),
        )
        ctx.check_cancelled()
        return tokenizer.decode(out[0], skip_special_tokens=True).strip()
