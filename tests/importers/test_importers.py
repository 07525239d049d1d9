"""Importers as objects: the Python API (``inline_host.importers``) and the CLI give the same
answers for a fake Hub repo, a local folder and a URL; a third-party source installed as a
package is found through the hook; a model's card survives a re-import; bad sources are one
line and exit 2; a URL download cut short is resumed by a new process."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from inline_host.importers import (
    FileImporter,
    HuggingFaceImporter,
    Requirements,
    SourceError,
    UrlImporter,
    find_local,
    importer_for,
    importers,
    list_local,
    remove_local,
    split_model_id,
)

from .._ports import free_port
from ..e2e.conftest import inline_exe
from ..hub._hub import ResumeHub
from ..hub.test_resume import wait_until
from ..models._hub import FakeHub

PLUGIN_SITE = Path(__file__).resolve().parent / "plugin_site"
CONFIG = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2,
          "num_attention_heads": 2, "num_key_value_heads": 1, "hidden_size": 16,
          "max_position_embeddings": 128}  # fmt: skip


def weights(params: int) -> bytes:
    """A real safetensors file: ``params`` bf16 zeros in one tensor."""
    header = {"w": {"dtype": "BF16", "shape": [params], "data_offsets": [0, 2 * params]}}
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + bytes(2 * params)


def repo_files(params: int = 5000) -> dict[str, bytes]:
    return {
        "config.json": json.dumps(CONFIG).encode(),
        "generation_config.json": json.dumps({"temperature": 0.6}).encode(),
        "model.safetensors": weights(params),
        "README.md": b"# tiny\n",
    }


def folder_of(root: Path, files: dict[str, bytes]) -> Path:
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    return root


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The environment of this process and of the CLIs it runs: its own models and data dirs,
    and a port no server answers on (the CLI works alone)."""
    values = {"INLINE_MODELS_DIR": str(tmp_path / "models"),
              "INLINE_DATA_DIR": str(tmp_path / "data"), "INLINE_PORT": str(free_port()),
              "HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_OFFLINE": "0"}  # fmt: skip
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return values


@pytest.fixture
def fake_hub(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    from huggingface_hub import constants

    files = {f"acme/tiny-llm/{p}": b for p, b in repo_files().items()}
    files["acme/no-weights/config.json"] = b"{}"
    files["acme/no-weights/README.md"] = b"nothing here\n"
    with FakeHub(files) as hub:
        monkeypatch.setattr(constants, "ENDPOINT", hub.url)
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                            hub.url + "/{repo_id}/resolve/{revision}/{filename}")  # fmt: skip
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        env["HF_ENDPOINT"] = hub.url
        yield hub


def inline(env: dict[str, str], *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([inline_exe(), *args], env={**os.environ, **env, **extra},
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def cli_json(env: dict[str, str], *args: str) -> dict:
    proc = inline(env, *args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def comparable(estimate: dict) -> dict:
    """An estimate without the machine's fit (the same either way, but phrased by the host)."""
    return {k: v for k, v in estimate.items() if k != "fit"}


# the Python API and the CLI agree ------------------------------------------------------------
def test_a_hub_repo_through_python_and_the_cli(tmp_path: Path, env: dict, fake_hub: FakeHub):
    imp = importer_for("hf:acme/tiny-llm")
    assert isinstance(imp, HuggingFaceImporter)
    assert (imp.name, imp.category, imp.source) == ("tiny-llm", "llm", "hf:acme/tiny-llm")
    assert [f.path for f in imp.files()] == ["config.json", "generation_config.json",
                                             "model.safetensors"]  # fmt: skip
    before = len(fake_hub.requests)
    req = imp.requirements()
    assert isinstance(req, Requirements) and req.params == 5000 and req.devices == 1
    assert not any(
        r[0] == "GET" and r[2] is None and r[1].endswith("model.safetensors")
        for r in fake_hub.requests[before:]
    )  # only ranged reads of the weights
    cli = cli_json(env, "models", "estimate", "hf:acme/tiny-llm")
    assert comparable(cli) == comparable(imp.estimate())
    plan = cli_json(env, "models", "import", "hf:acme/tiny-llm", "--dry-run")
    assert [f["path"] for f in plan["files"]] == [f.path for f in imp.files()]
    assert plan["dest"] == str(imp.dest)

    folder = imp.fetch()
    assert folder == Path(env["INLINE_MODELS_DIR"]) / "llm" / "tiny-llm"
    card = imp.card()
    assert card["source"] == "hf:acme/tiny-llm" and card["requirements"]["params"] == 5000
    assert card["generation"]["temperature"] == 0.6 and card["compile"] is False
    other = {**env, "INLINE_MODELS_DIR": str(tmp_path / "cli-models")}
    proc = inline(other, "models", "import", "hf:acme/tiny-llm")
    assert proc.returncode == 0, proc.stderr
    cli_folder = Path(proc.stdout.strip())
    assert sorted(p.name for p in cli_folder.iterdir()) == sorted(p.name for p in folder.iterdir())
    cli_card = json.loads((cli_folder / "inline.json").read_text())
    assert cli_card == card  # the same card, field by field, origins included


def test_a_local_folder_through_python_and_the_cli(tmp_path: Path, env: dict):
    src = folder_of(tmp_path / "src" / "tiny-local", repo_files(7000))
    imp = importer_for(f"file:{src}")
    assert isinstance(imp, FileImporter)
    assert (imp.name, imp.category) == ("tiny-local", "llm")
    assert [f.path for f in imp.files()] == [
        "config.json",
        "generation_config.json",
        "model.safetensors",
    ]  # README.md is left out
    assert imp.requirements().params == 7000
    assert comparable(cli_json(env, "models", "estimate", str(src))) == comparable(imp.estimate())
    dest = imp.fetch()
    assert (dest / "model.safetensors").read_bytes() == (src / "model.safetensors").read_bytes()
    listed = cli_json(env, "models", "list")
    assert listed == msgspec.to_builtins(list_local(Path(env["INLINE_MODELS_DIR"])))
    assert [(m["name"], m["category"], m["source"], m["complete"]) for m in listed] == [
        ("tiny-local", "llm", f"file:{src}", True)
    ]
    shown = cli_json(env, "models", "show", "tiny-local")
    assert shown["card"] == imp.card()
    text = inline(env, "models", "show", "tiny-local")
    assert "requirements.vram_gb = " in text.stdout and "(estimate)" in text.stdout
    assert "generation.temperature = 0.6  (import)" in text.stdout


def test_an_edited_card_field_survives_a_reimport_and_the_model_is_removed(tmp_path: Path,
                                                                          env: dict):  # fmt: skip
    src = folder_of(tmp_path / "src" / "tiny-edit", repo_files())
    assert inline(env, "models", "import", f"file:{src}").returncode == 0
    dest = Path(env["INLINE_MODELS_DIR"]) / "llm" / "tiny-edit"
    card = json.loads((dest / "inline.json").read_text())
    card["requirements"]["vram_gb"] = 24
    card["compile"] = True
    (dest / "inline.json").write_text(json.dumps(card))
    (src / "model.safetensors").write_bytes(weights(9000))  # a new version upstream
    (dest / "model.safetensors").unlink()
    again = inline(env, "models", "import", f"file:{src}")
    assert again.returncode == 0, again.stderr
    card = json.loads((dest / "inline.json").read_text())
    assert card["requirements"]["vram_gb"] == 24 and card["compile"] is True
    assert card["requirements"]["params"] == 9000  # the estimate's own field followed
    shown = inline(env, "models", "show", "tiny-edit").stdout
    assert "requirements.vram_gb = 24  (user)" in shown and "compile = true  (user)" in shown
    estimate = inline(env, "models", "estimate", str(dest))
    assert estimate.returncode == 0 and json.loads((dest / "inline.json").read_text()) == card

    removed = inline(env, "models", "remove", "tiny-edit")
    assert removed.returncode == 0, removed.stderr
    assert not dest.exists()
    assert inline(env, "models", "list").stdout.startswith("no models")
    gone = inline(env, "models", "show", "tiny-edit")
    assert gone.returncode == 2 and "no model 'tiny-edit'" in gone.stderr


# a source by plugin --------------------------------------------------------------------------
def test_a_third_party_source_is_found_through_the_hook(
    tmp_path: Path, env: dict, monkeypatch: pytest.MonkeyPatch
):
    assert "example" not in importers()  # not installed: not known
    unknown = inline(env, "models", "estimate", "example:tiny")
    assert unknown.returncode == 2 and "no source has the prefix 'example:'" in unknown.stderr
    monkeypatch.syspath_prepend(str(PLUGIN_SITE))  # installed, as pip would (a dist-info)
    plugged = {**env, "PYTHONPATH": os.pathsep.join([str(PLUGIN_SITE), *sys.path])}
    assert "example" in importers()
    listed = inline(plugged, "models", "sources")
    assert listed.returncode == 0 and "example:" in listed.stdout and "hf:" in listed.stdout
    imp = importer_for("example:tiny")
    assert type(imp).__module__ == "example_importer" and imp.requirements().params == 3000
    estimate = cli_json(plugged, "models", "estimate", "example:tiny")
    assert comparable(estimate) == comparable(imp.estimate())
    proc = inline(plugged, "models", "import", "example:tiny")
    assert proc.returncode == 0, proc.stderr
    dest = Path(proc.stdout.strip())
    assert dest == Path(env["INLINE_MODELS_DIR"]) / "llm" / "tiny"
    card = json.loads((dest / "inline.json").read_text())
    assert card["source"] == "example:tiny" and card["requirements"]["params"] == 3000
    assert find_local(Path(env["INLINE_MODELS_DIR"]), "tiny").source == "example:tiny"
    empty = inline(plugged, "models", "import", "example:empty")
    assert empty.returncode == 2 and "no weight files" in empty.stderr


# bad input -----------------------------------------------------------------------------------
def test_bad_sources_are_one_line_and_exit_2(tmp_path: Path, env: dict, fake_hub: FakeHub):
    with ResumeHub({"x/y/not.safetensors": b"<html>not a model</html>" * 10}) as web:
        bad_url = f"{web.url}/x/y/resolve/main/not.safetensors"
        for args, message in (
            (("import", "nope:acme/tiny"), "no source has the prefix 'nope:'"),
            (("import", "acme/tiny-llm"), "names no source"),
            (("import", "hf:acme/no-weights"), "the repo holds no weight files"),
            (("estimate", "hf:acme/no-weights"), "the repo holds no weight files"),
            (("import", "url:https://example.invalid/model.bin"), "not a safetensors file"),
            (("import", f"url:{bad_url}"), "its first bytes hold no header"),
            (("import", "file:/no/such/folder"), "no such file or folder"),
            (("import", "hf:acme/nothing"), "no such repo"),
        ):
            proc = inline(env, "models", *args)
            assert proc.returncode == 2, (args, proc.stderr)
            lines = proc.stderr.strip().splitlines()
            assert len(lines) == 1 and message in lines[0], (args, proc.stderr)
        assert not (Path(env["INLINE_MODELS_DIR"]) / "checkpoints" / "not").exists()
    with pytest.raises(SourceError, match="names no source"):
        split_model_id("just-a-name")


# a URL, resumed by a new process -------------------------------------------------------------
def test_a_url_download_cut_short_is_resumed_by_a_new_process(
    tmp_path: Path, env: dict, monkeypatch: pytest.MonkeyPatch
):
    from huggingface_hub import constants

    data = weights(200_000)
    key = "files/tiny/tiny-vae.safetensors"
    with ResumeHub({key: data}) as web:
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        url = f"{web.url}/files/tiny/resolve/main/tiny-vae.safetensors"
        imp = importer_for(f"url:{url}", task="vae")
        assert isinstance(imp, UrlImporter) and (imp.name, imp.category) == ("tiny-vae", "vae")
        assert imp.requirements().params == 200_000
        assert all(g.range for g in web.gets_of(key))  # sized by ranged reads alone
        served = web.stall_at(key, 150_000)
        first = subprocess.Popen([inline_exe(), "models", "import", f"url:{url}", "--as", "vae"],
                                 env={**os.environ, **env}, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE)  # fmt: skip
        part = imp.stage() / "tiny-vae.safetensors.incomplete"
        try:
            assert served.wait(60), "the first download never started"
            wait_until(lambda: part.is_file() and part.stat().st_size == 150_000, "bytes staged")
        finally:
            first.kill()  # the process dies mid-file
            first.wait(30)
        web.release.set()
        second = inline(env, "models", "import", f"url:{url}", "--as", "vae")
        assert second.returncode == 0, second.stderr
        dest = Path(second.stdout.strip())
        assert (dest / "tiny-vae.safetensors").read_bytes() == data
        last = web.gets_of(key)[-1]
        assert last.range == "bytes=150000-" and last.sent == len(data) - 150_000
        assert json.loads((dest / "inline.json").read_text())["source"] == f"url:{url}"
    models = Path(env["INLINE_MODELS_DIR"])
    assert not (models / ".downloads").exists()  # nothing staged is left behind
    remove_local(models, find_local(models, "vae/tiny-vae"))
    assert list_local(models) == []
