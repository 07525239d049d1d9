"""Plain transformers ``generate`` with a streamer, one prompt per stdin line (the baseline of
bench/text.py). Prints one JSON line per prompt: ``ttft`` (s to the first token), ``decode`` (s
from the first to the last token) and ``tokens``."""

from __future__ import annotations

import json
import sys
import time

import torch
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
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        prompt = line.strip()
        started = time.perf_counter()
        ids = tok.apply_chat_template([{"role": "user", "content": prompt}],
                                      add_generation_prompt=True, return_tensors="pt",
                                      return_dict=True)  # fmt: skip
        clock = Clock()
        with torch.inference_mode():
            model.generate(**ids, max_new_tokens=new_tokens,
                           do_sample=False, streamer=clock)  # fmt: skip
        t = clock.times
        print(json.dumps({"ttft": t[0] - started, "decode": t[-1] - t[0], "tokens": len(t)}),
              flush=True)  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
