"""Embeddings computed without Inline: the baseline ``text/embed`` must match.

``python _embed_baseline.py JOB`` where JOB is JSON: ``{"folder", "texts", "library"}``.
``library`` ``"sentence-transformers"``: ``SentenceTransformer(folder).encode(texts)`` (run
where sentence-transformers is importable). ``"transformers"`` (the text pack venv): plain
``AutoModel`` and the pooling spelled out here, as JOB says: ``"pooling"`` (``mean`` or ``cls``),
``"max_length"`` (null: the tokenizer's), ``"dense"`` (a ``2_Dense`` folder: Linear + Tanh),
``"normalize"``. Prints one JSON line: ``{"vectors", "tokens"}`` (tokens: -1 from
sentence-transformers, which does not count them).
"""

from __future__ import annotations

import json
import sys

import torch


def with_transformers(job: dict) -> dict:
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(job["folder"], local_files_only=True)
    model = AutoModel.from_pretrained(job["folder"], local_files_only=True).eval()
    batch = tok(job["texts"], padding=True, truncation=True, max_length=job.get("max_length"),
                return_tensors="pt")  # fmt: skip
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    if job.get("pooling", "mean") == "cls":
        pooled = hidden[:, 0]
    else:
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    if job.get("dense"):
        from safetensors.torch import load_file

        state = load_file(job["dense"] + "/model.safetensors")
        pooled = torch.tanh(pooled @ state["linear.weight"].T + state["linear.bias"])
    if job.get("normalize"):
        pooled = pooled / pooled.norm(dim=-1, keepdim=True)
    tokens = int(batch["attention_mask"].sum())
    return {"vectors": pooled.tolist(), "tokens": tokens}


def with_sentence_transformers(job: dict) -> dict:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(job["folder"], local_files_only=True, device="cpu")
    vectors = model.encode(job["texts"], convert_to_numpy=True, batch_size=len(job["texts"]))
    return {"vectors": vectors.astype("float64").tolist(), "tokens": -1}


if __name__ == "__main__":
    job = json.loads(sys.argv[1])
    st = job["library"] == "sentence-transformers"
    print(json.dumps(with_sentence_transformers(job) if st else with_transformers(job)))
