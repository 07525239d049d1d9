"""Text fixtures: the pack venvs, the tiny text models and encoders (and the tiny Z-Image for the
client's ``generate``), built once per session (``tests/_builds.py``), and one real server over
them (with a token)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.conftest import Server, start_server

from .._builds import (
    BUILT,
    build_packs,
    built_once,
    data_dir_over,
    run_builder,
    shared_packs,
    tiny_zimage,
)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TOKEN = "s3cret-text"
QUIET = {"TORCHAO_FORCE_SKIP_LOADING_SO_FILES": "1", "HF_HUB_OFFLINE": "1"}


@dataclass(frozen=True)
class TextModels:
    root: Path  # holds llm/<name>/ (the models dir of the server)
    python: Path  # the text pack venv's interpreter
    report: dict[str, Any]

    def baseline(self, **job: Any) -> dict[str, Any]:
        """Plain transformers ``generate`` on a folder (see ``_baseline.py``)."""
        proc = subprocess.run(
            [str(self.python), str(HERE / "_baseline.py"), json.dumps(job)],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, **QUIET},
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])


@dataclass(frozen=True)
class EmbedModels:
    root: Path  # holds embeddings/<name>/ (the same models dir as the server's)
    python: Path  # the text pack venv's interpreter
    st_path: Path | None  # sentence-transformers for that interpreter (None: not installable)
    st_skip: str  # why st_path is None

    def baseline(self, library: str = "transformers", **job: Any) -> dict[str, Any]:
        """The vectors without Inline (see ``_embed_baseline.py``): plain transformers in the
        pack venv, or sentence-transformers on top of it."""
        env = {**os.environ, **QUIET}
        if library == "sentence-transformers":
            if self.st_path is None:
                pytest.skip(self.st_skip)
            env["PYTHONPATH"] = str(self.st_path)
        proc = subprocess.run(
            [str(self.python), str(HERE / "_embed_baseline.py"),
             json.dumps({**job, "library": library})],
            capture_output=True, text=True, timeout=300, env=env,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])


def _install_sentence_transformers(python: Path, out: Path) -> None:
    """sentence-transformers and what it needs beyond the pack venv (scipy, scikit-learn...)
    into ``out``, for ``python`` (its torch and transformers stay the pack venv's own)."""
    from uv import find_uv_bin

    uv = find_uv_bin()
    frozen = subprocess.run(
        [uv, "pip", "freeze", "--python", str(python)], capture_output=True, text=True, check=True
    ).stdout
    excludes = out.parent / f"{out.name}.excludes.txt"
    names = [line.split("=")[0].split(" @ ")[0].strip() for line in frozen.splitlines()]
    excludes.write_text("\n".join(n for n in names if n) + "\n")
    proc = subprocess.run(
        [uv, "pip", "install", "--quiet", "--python", str(python), "--target", str(out / "lib"),
         "sentence-transformers", "--excludes", str(excludes)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    (out / "status.txt").write_text("ok" if proc.returncode == 0 else proc.stderr[-2000:])


@pytest.fixture(scope="session")
def embed_models(
    text_data: Path, text_models: TextModels, tmp_path_factory: pytest.TempPathFactory
) -> EmbedModels:
    """The tiny encoders (``_tiny_embed.py``) in the server's models dir, and
    sentence-transformers beside the text pack venv for the baselines (once per session)."""
    python = _venv_python(text_data, "text")
    reuse = os.environ.get("INLINE_TEXT_TEST_DATA")
    if reuse:
        built = text_data / "tiny-embed"
        if not (built / "embed-report.json").is_file():
            run_builder(python, HERE / "_tiny_embed.py", built)
        st = text_data / "st-baseline"
        if not (st / "status.txt").is_file():
            st.mkdir(exist_ok=True)
            _install_sentence_transformers(python, st)
    else:
        built = built_once(
            tmp_path_factory,
            "tiny-embed",
            lambda out: run_builder(python, HERE / "_tiny_embed.py", out),
        )
        st = built_once(
            tmp_path_factory, "st-baseline", lambda out: _install_sentence_transformers(python, out)
        )
    shutil.copytree(built / "embeddings", text_models.root / "embeddings", dirs_exist_ok=True)
    status = (st / "status.txt").read_text()
    installed = status == "ok"
    why = f"sentence-transformers could not be installed for the baseline: {status}"
    return EmbedModels(text_models.root, python, st / "lib" if installed else None, why)


@pytest.fixture(scope="session")
def text_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data dir over the session's pack venvs (text, zimage...), built once
    (``INLINE_TEXT_TEST_DATA`` names one of its own to reuse between sessions while working on
    these tests)."""
    names = ("basics", "text", "primitives", "zimage")
    reuse = os.environ.get("INLINE_TEXT_TEST_DATA")
    if reuse:
        build_packs(Path(reuse) / "packs", names)
        return Path(reuse)
    shared_packs(tmp_path_factory, names)
    return data_dir_over(tmp_path_factory, "text-data")


def _venv_python(data: Path, pack: str) -> Path:
    return next((data / "packs" / pack).glob("*/venv/bin/python"))


@pytest.fixture(scope="session")
def text_models(text_data: Path, tmp_path_factory: pytest.TempPathFactory) -> TextModels:
    models = text_data / "models"
    python = _venv_python(text_data, "text")
    reuse = os.environ.get("INLINE_TEXT_TEST_DATA")
    if (models / "report.json").is_file() and reuse:
        return TextModels(models, python, json.loads((models / "report.json").read_text()))
    if reuse:
        run_builder(python, HERE / "_tiny_text.py", models)
    else:
        built = built_once(
            tmp_path_factory,
            "tiny-text",
            lambda out: run_builder(python, HERE / "_tiny_text.py", out),
        )
        shutil.copytree(built, models, ignore=shutil.ignore_patterns(BUILT))
    llm = models / "llm"
    # the same weights with a small card: prompts over 32 tokens are cut
    shutil.copytree(llm / "qwen-tiny", llm / "qwen-short", dirs_exist_ok=True)
    (llm / "qwen-short" / "inline.json").write_text('{"max_total_tokens": 64}')
    report = json.loads((models / "report.json").read_text())
    return TextModels(models, python, report)


@pytest.fixture(scope="session")
def zimage_models(
    text_data: Path, text_models: TextModels, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The tiny random Z-Image in the ComfyUI layout, in the same models dir."""
    python = _venv_python(text_data, "zimage")
    if os.environ.get("INLINE_TEXT_TEST_DATA"):
        root = text_data / "tiny-zimage"
        if not (root / "report.json").is_file():
            run_builder(python, ROOT / "tests/models/_tiny.py", root)
    else:
        root = tiny_zimage(tmp_path_factory, python)
    shutil.copytree(root / "comfy", text_models.root, dirs_exist_ok=True)
    return root


@pytest.fixture(scope="session")
def server(text_data: Path, text_models: TextModels, tmp_path_factory: Any) -> Iterator[Server]:
    inputs = tmp_path_factory.mktemp("text-inputs")
    srv = start_server(
        text_data,
        inputs,
        extra_env={"INLINE_PACK_PATHS": "", "INLINE_TOKEN": TOKEN, **QUIET},
        wait=False,
    )
    _wait_healthy(srv)
    try:
        yield srv
    finally:
        srv.stop()


def _wait_healthy(server: Server, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    headers = {"Authorization": f"Bearer {TOKEN}"}
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"server exited: {server.log.read_text()[-3000:]}")
        try:
            if httpx.get(server.url + "/v1/health", headers=headers, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)  # polling a starting process; not synchronisation between tests
    raise RuntimeError(f"server did not start: {server.log.read_text()[-3000:]}")


@pytest.fixture(scope="session")
def worker_log(text_data: Path) -> Path:
    return text_data / "logs" / "text.log"
