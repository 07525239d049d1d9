"""Running ``generate``: a static cache, token-by-token decoding, cancel, compile with fallback.

transformers' own ``generate`` does the decoding (so greedy output is exactly what plain
``generate`` gives). A streamer receives each new token inside the generation loop and decodes
it incrementally; a stopping criterion ends the loop on cancel or on a stop string. With
``compile`` (CUDA, the card asks) ``generate`` compiles its forward through transformers
(``CompileConfig``, reduce-overhead); a compile failure falls back to eager once, and is reported
once per model.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Callable
from typing import Any

from ._load import Loaded

log = logging.getLogger("inline.text")
_GENERATE_LOCK = threading.Lock()


def generate_lock() -> threading.Lock:
    """Held through every ``generate`` of this worker: one at a time (they seed torch's global
    generators, and a model's static cache is reused from call to call)."""
    return _GENERATE_LOCK


def end_ids(loaded: Loaded) -> set[int]:
    """The token ids that end ``loaded``'s replies (its generation config's)."""
    eos = loaded.model.generation_config.eos_token_id
    return set(eos if isinstance(eos, list) else [eos]) if eos is not None else set()


class IncrementalDecoder:
    """Decodes token ids one at a time into text pieces (multi-byte characters held whole)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self._prefix = 0
        self._read = 0

    def push(self, token: int) -> str:
        self.ids.append(token)
        decode = self.tokenizer.decode
        before = decode(self.ids[self._prefix : self._read], skip_special_tokens=True)
        after = decode(self.ids[self._prefix :], skip_special_tokens=True)
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self._prefix, self._read = self._read, len(self.ids)
            return after[len(before) :]
        return ""


class TokenSink:
    """transformers' streamer seam: skips the prompt, hands each new token to ``on_token``.

    ``skip`` tokens are swallowed first (a retry after a compile failure replays the tokens
    already streamed)."""

    def __init__(self, on_token: Callable[[int], None], *, has_prompt: bool, skip: int = 0) -> None:
        self.on_token = on_token
        self._prompt = has_prompt
        self._skip = skip
        self.count = 0

    def put(self, value: Any) -> None:
        if self._prompt:
            self._prompt = False
            return
        for token in value.reshape(-1).tolist():
            self.count += 1
            if self.count > self._skip:
                self.on_token(int(token))

    def end(self) -> None:
        pass


def stopping(should_stop: Callable[[], bool]) -> Any:
    """A stopping criterion that ends generation when ``should_stop()`` (cancel, stop string)."""
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    class _Stop(StoppingCriteria):
        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            return torch.full((input_ids.shape[0],), should_stop(), dtype=torch.bool,
                              device=input_ids.device)  # fmt: skip

    return StoppingCriteriaList([_Stop()])


def generation_config(loaded: Loaded, *, cache_length: int, compile_: bool, **kw: Any) -> Any:
    """A ``GenerationConfig`` with the static cache sized to ``cache_length``."""
    from transformers import CompileConfig

    # the model's own config (its eos ids, decoder start...), with this call's settings on top
    config = copy.deepcopy(loaded.model.generation_config)
    tok = loaded.tokenizer
    if config.eos_token_id is None:
        config.eos_token_id = tok.eos_token_id
    if config.pad_token_id is None:
        config.pad_token_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    config.update(
        **kw,
        cache_implementation="static",
        max_cache_len=cache_length,
        compile_config=CompileConfig(mode="reduce-overhead") if compile_ else None,
        disable_compile=not compile_,
    )
    return config


def penalties(presence: float, frequency: float, prompt_length: int) -> Any:
    """OpenAI's ``presence_penalty`` / ``frequency_penalty`` as a logits processor: each token's
    logit lowered by ``presence`` once it appeared in the reply, and by ``frequency`` times how
    often (the prompt does not count). None when both are 0."""
    if not presence and not frequency:
        return None
    import torch
    from transformers import LogitsProcessor

    class _Penalties(LogitsProcessor):
        def __call__(self, input_ids: Any, scores: Any) -> Any:
            reply = input_ids[:, prompt_length:]
            if reply.shape[1] == 0:
                return scores
            counts = torch.zeros_like(scores).scatter_add_(
                1, reply, torch.ones_like(reply, dtype=scores.dtype)
            )
            return scores - frequency * counts - presence * (counts > 0).to(scores.dtype)

    return _Penalties()


class LogprobRecorder:
    """A logits processor (first in the list: it sees the model's own logits) that keeps each
    generated token's log-probability and the ``top`` likeliest tokens at its position. A
    position's token is known at the next step (the last input id) or, for the last one, from
    the output (``finish``)."""

    def __init__(self, top: int) -> None:
        self.top = top
        self.tokens: list[int] = []
        self.logprobs: list[float] = []
        self.tops: list[list[tuple[int, float]]] = []
        self._last: Any = None

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        if self._last is not None:
            self._take(int(input_ids[0, -1]))
        self._last = torch.log_softmax(scores[0].float(), dim=-1)
        return scores

    def _take(self, token: int) -> None:
        last = self._last
        self.tokens.append(token)
        self.logprobs.append(float(last[token]))
        if self.top:
            values, ids = last.topk(self.top)
            self.tops.append(list(zip(ids.tolist(), values.tolist(), strict=True)))
        else:
            self.tops.append([])
        self._last = None

    def finish(self, generated: list[int]) -> None:
        """Record the last generated token (its position was scored, never fed back)."""
        if self._last is not None and len(self.tokens) < len(generated):
            self._take(generated[len(self.tokens)])


def sampling(temperature: float, top_p: float, num_beams: int = 1) -> dict[str, Any]:
    """``generate``'s sampling arguments (temperature 0: greedy)."""
    if temperature <= 0:
        return {"do_sample": False, "num_beams": num_beams}
    return {"do_sample": True, "temperature": temperature, "top_p": top_p, "num_beams": num_beams}


def seeded(seed: int) -> None:
    """Seed torch's generators for a sampled reply (``seed`` < 0: leave them)."""
    if seed < 0:
        return
    import torch

    torch.manual_seed(seed)


def run_generate(
    loaded: Loaded,
    inputs: dict[str, Any],
    *,
    seed: int,
    stop: Callable[[], bool],
    on_token: Callable[[int], None] | None,
    cache_length: int,
    processors: Callable[[], list[Any]] = list,
    **kw: Any,
) -> Any:
    """``model.generate`` on ``inputs``; compiled when the model may be, else (and after a compile
    failure) eager. ``processors`` makes the logits processors of one try (a grammar's holds
    its state: a retry starts a new one). The output ids."""
    import torch

    has_prompt = not loaded.model.config.is_encoder_decoder
    attempts = [True, False] if loaded.compile and not loaded.compile_failed else [False]
    sink: TokenSink | None = None
    for compile_ in attempts:
        config = generation_config(loaded, cache_length=cache_length, compile_=compile_, **kw)
        sink = (
            None
            if on_token is None
            else TokenSink(
                on_token, has_prompt=has_prompt, skip=sink.count if sink is not None else 0
            )
        )
        with _GENERATE_LOCK:
            seeded(seed)
            try:
                with torch.inference_mode():
                    return loaded.model.generate(
                        **{k: v.to(loaded.device) for k, v in inputs.items()},
                        generation_config=config,
                        streamer=sink,
                        stopping_criteria=stopping(stop),
                        logits_processor=_processor_list(processors()),
                    )
            except Exception as exc:
                if not compile_ or _is_cancel(exc):
                    raise
                loaded.compile_failed = True
                log.warning(
                    "compiling generate for %s failed (%s: %s); running eager from now on",
                    loaded.folder.name, type(exc).__name__, exc,
                )  # fmt: skip
    raise AssertionError("unreachable")


def _processor_list(processors: list[Any]) -> Any:
    from transformers import LogitsProcessorList

    return LogitsProcessorList([p for p in processors if p is not None])


def _is_cancel(exc: BaseException) -> bool:
    from inline_sdk import Cancelled

    return isinstance(exc, Cancelled)
