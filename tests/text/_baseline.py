"""Plain transformers ``generate`` on a model folder: the baseline the text nodes must match.

``python _baseline.py JOB`` (the text pack venv) where JOB is JSON: ``{"folder", "kind":
"causal"|"seq2seq", "messages", "tools", "max_new_tokens", "text"}``. Prints one JSON line:
the generated ids and their raw decoding (special tokens skipped, as the node decodes).
"""

from __future__ import annotations

import json
import sys

import torch
from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer


def main(job: dict) -> dict:
    tok = AutoTokenizer.from_pretrained(job["folder"], local_files_only=True)
    if job["kind"] == "causal":
        model = AutoModelForCausalLM.from_pretrained(job["folder"], local_files_only=True)
        ids = tok.apply_chat_template(
            job["messages"], tools=job.get("tools"), add_generation_prompt=True,
            return_tensors="pt", return_dict=True,
        )  # fmt: skip
        n = ids["input_ids"].shape[1]
        out = model.generate(**ids, max_new_tokens=job["max_new_tokens"], do_sample=False)
        generated = out[0, n:].tolist()
    else:
        model = AutoModelForSeq2SeqLM.from_pretrained(job["folder"], local_files_only=True)
        ids = tok(job["text"], return_tensors="pt")
        out = model.generate(**ids, max_new_tokens=job["max_new_tokens"], do_sample=False)
        generated = out[0].tolist()
    with torch.no_grad():
        text = tok.decode(generated, skip_special_tokens=True)
    return {"ids": generated, "text": text, "prompt_tokens": int(ids["input_ids"].shape[1])}


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
