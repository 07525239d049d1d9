"""Builds the tiny text models the text tests use (run with the text pack venv's python), with
the text pack's shipped builders (``inline_text._demo_llm``, what ``inline demo models`` uses).

``python _tiny_text.py OUT`` writes, under ``OUT/llm/``:

- ``qwen-tiny/``: a Qwen3-style causal LM taught two replies: asked with tools it thinks, then
  calls ``get_weather`` in a ``<tool_call>`` block; asked without, it thinks, then answers in
  plain text (greedy decoding is peaky: no ties).
- ``qwen-random/``: the same shape untrained (it never stops by itself), 8192 positions.
- ``t5-tiny/``: a tiny ``T5ForConditionalGeneration`` (random weights) with its own tokenizer.

and ``OUT/report.json`` (the replies each model learnt, parameter counts).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from inline_text._demo_llm import PLAIN_REPLY, TOOL_REPLY, TOOLS, build_qwen, build_t5


def main(out: Path) -> None:
    llm = out / "llm"
    llm.mkdir(parents=True, exist_ok=True)
    report = {
        "qwen": build_qwen(llm / "qwen-tiny", llm / "qwen-random"),
        "t5": build_t5(llm / "t5-tiny"),
        "tools": TOOLS,
        "tool_reply": TOOL_REPLY,
        "plain_reply": PLAIN_REPLY,
    }
    (out / "report.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
