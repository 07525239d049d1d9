"""The cache ``text/complete`` and ``text/rewrite`` decode with: static, sized to the model's
cache length, only when ``generate`` compiles (one captured graph); eager, the model's own
cache, which grows with the reply (a static one only makes each step attend over its whole
length). Checked on the real ``GenerationConfig`` of the tiny Qwen, in the pack's venv."""

from __future__ import annotations

import json
import os
import subprocess

from .conftest import QUIET, TextModels

SCRIPT = """
import json, sys
from pathlib import Path
from transformers import AutoModelForCausalLM, AutoTokenizer
from inline_text._card import ModelCard
from inline_text._generate import generation_config
from inline_text._load import Loaded

folder = sys.argv[1]
model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
loaded = Loaded(Path(folder), model, tok, ModelCard(), "cpu", False)
out = {}
for name, compile_ in (("eager", False), ("compiled", True)):
    c = generation_config(loaded, cache_length=512, compile_=compile_, max_new_tokens=8)
    out[name] = {"cache": c.cache_implementation, "length": getattr(c, "max_cache_len", None),
                 "compile": c.compile_config is not None, "disabled": c.disable_compile,
                 "new": c.max_new_tokens, "eos": c.eos_token_id}
out["model"] = model.generation_config.cache_implementation
print(json.dumps(out))
"""


def test_static_cache_only_when_generate_compiles(text_models: TextModels) -> None:
    folder = text_models.root / "llm" / "qwen-tiny"
    proc = subprocess.run(
        [str(text_models.python), "-c", SCRIPT, str(folder)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **QUIET},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    eager, compiled = got["eager"], got["compiled"]
    assert eager["cache"] == got["model"] and eager["cache"] != "static"  # the model's own
    assert not eager["compile"] and eager["disabled"]
    assert compiled["cache"] == "static" and compiled["length"] == 512
    assert compiled["compile"] and not compiled["disabled"]
    assert eager["new"] == compiled["new"] == 8  # the call's settings on top, either way
    assert eager["eos"] == compiled["eos"] is not None
