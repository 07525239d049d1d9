"""Plain transformers ``generate`` with a streamer, one prompt per stdin line (the baseline of
bench/text.py). Prints one JSON line per prompt: ``ttft`` (s to the first token), ``decode`` (s
from the first to the last token) and ``tokens``.

It decodes with the same generation settings as ``text/complete``: greedy, and the static KV
cache sized by the text pack's rule (the model card's ``max_total_tokens``, never past the
model's ``max_position_embeddings``), so the comparison measures the engine path, not a
different cache."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
from inline_text._card import cache_length, read_card
from transformers import AutoModelForCausalLM, AutoTokenizer


class Clock:
    def __init__(self) -> None:
        self.times: list[float] = []
        self._prompt = True

    def put(self, value: object) -> None:
        if self._prompt:
            self._prompt = False
            return
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


def main(folder: str, new_tokens: int) -> None:
    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True).eval()
    length = cache_length(read_card(Path(folder)), model.config.max_position_embeddings)
    print(json.dumps({"ready": True, "cache": length}), flush=True)
    for line in sys.stdin:
        prompt = line.strip()
        started = time.perf_counter()
        ids = tok.apply_chat_template([{"role": "user", "content": prompt}],
                                      add_generation_prompt=True, return_tensors="pt",
                                      return_dict=True)  # fmt: skip
        clock = Clock()
        with torch.inference_mode():
            model.generate(**ids, max_new_tokens=new_tokens, do_sample=False, streamer=clock,
                           cache_implementation="static", max_cache_len=length)  # fmt: skip
        t = clock.times
        print(json.dumps({"ttft": t[0] - started, "decode": t[-1] - t[0], "tokens": len(t)}),
              flush=True)  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
