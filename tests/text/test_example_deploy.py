"""``examples/deploy_text_model.py`` end to end, as a user runs it: a tiny causal LM in a folder
is imported (sized from its headers, copied, given a card), deployed on one replica, asked for
a streamed reply, undeployed and removed, against the session's real server."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.api.conftest import Server

from .conftest import QUIET, ROOT, TOKEN, TextModels


def test_the_deploy_example_runs_the_whole_lifecycle(
    server: Server, text_models: TextModels, tmp_path: Path
) -> None:
    source = tmp_path / "qwen-deploy"
    shutil.copytree(text_models.root / "llm" / "qwen-tiny", source)
    (source / "inline.json").unlink(missing_ok=True)
    dest = text_models.root / "llm" / "qwen-deploy"
    env = {**os.environ, **QUIET, "INLINE_MODELS_DIR": str(text_models.root),
           "INLINE_TOKEN": TOKEN}  # fmt: skip
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "deploy_text_model.py"), f"file:{source}",
         "--url", server.url],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert f"file:{source}: qwen-deploy (llm)" in out and "parameters; one replica needs" in out
    assert "deployed qwen-deploy" in out and "ready" in out
    assert "reply: '" in out and "reply: ''" not in out  # the tiny model said something
    assert "undeployed qwen-deploy" in out and "removed llm/qwen-deploy" in out
    assert not dest.exists()
    assert "Traceback" not in proc.stderr
