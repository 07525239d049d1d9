"""``python -m inline_text._demo OUT FAMILY...``: the text pack's demo models (tiny, random
weights, built here: nothing is downloaded), in the models-dir layout under ``OUT``, for
``inline demo models`` (which runs this in the pack's venv and moves the result into place).

Families: ``llm`` -> ``llm/demo-qwen3/`` (a Qwen3-style causal LM taught two replies, with a
chat template that renders tools), ``seq2seq`` -> ``llm/demo-t5/`` (a T5 encoder-decoder),
``embed`` -> ``embeddings/demo-embed/`` (a sentence-transformers encoder, mean pooling).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from ._demo_embed import build_st, tokenizer
from ._demo_llm import build_qwen, build_t5


def _embed(folder: Path) -> object:
    return build_st(folder, tokenizer())


#: family -> (its folder under OUT, the builder writing it)
FAMILIES: dict[str, tuple[str, Callable[[Path], object]]] = {
    "llm": ("llm/demo-qwen3", build_qwen),
    "seq2seq": ("llm/demo-t5", build_t5),
    "embed": ("embeddings/demo-embed", _embed),
}


def main(argv: list[str]) -> int:
    out, families = Path(argv[0]), argv[1:] or list(FAMILIES)
    for family in families:
        rel, build = FAMILIES[family]
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        build(out / rel)
        print(f"built {rel}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
