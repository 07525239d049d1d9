"""Builds the tiny encoders the embedding tests use (run with the text pack venv's python), with
the text pack's shipped builders (``inline_text._demo_embed``, what ``inline demo models`` uses).

``python _tiny_embed.py OUT`` writes, under ``OUT/embeddings/`` (random weights, a WordPiece
tokenizer trained here, 64 positions): ``bert-tiny-st/`` (the classic sentence-transformers
layout: mean pooling, Normalize, ``max_seq_length`` 32), ``bert-tiny-dense/`` (the
sentence-transformers 5+ layout: CLS pooling and a ``2_Dense`` layer 32 -> 16, no Normalize) and
``bert-tiny/`` (a plain transformers folder); and ``OUT/embed-report.json`` (parameter counts).
"""

from __future__ import annotations

import sys
from pathlib import Path

from inline_text._demo_embed import build_dense, build_plain, build_st, tokenizer, write


def main(out: Path) -> None:
    root = out / "embeddings"
    fast = tokenizer()
    report = {
        "st": build_st(root / "bert-tiny-st", fast),
        "dense": build_dense(root / "bert-tiny-dense", fast),
        "plain": build_plain(root / "bert-tiny", fast),
    }
    write(out / "embed-report.json", report)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
