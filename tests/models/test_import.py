"""``inline models import hf:...`` and ``inline models estimate``: a tiny causal LM and a tiny
diffusers pipeline served by a local fake Hub land in models/llm/ and models/diffusers/, load
with transformers / diffusers in a pack venv, and are sized from their headers over HTTP."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from ..e2e.conftest import inline_exe
from ._hub import FakeHub

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def tiny_repos(tmp_path_factory: pytest.TempPathFactory, pack_python: Path) -> dict:
    """The two repos' files (``org/name/path -> bytes``) and their true parameter counts."""
    root = tmp_path_factory.mktemp("tiny-repos")
    proc = subprocess.run([str(pack_python), str(HERE / "_tiny_repos.py"), str(root)],
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = json.loads(proc.stdout.strip().splitlines()[-1])
    files: dict[str, bytes] = {}
    for name in ("tiny-llm", "tiny-pipe"):
        for p in sorted((root / name).rglob("*")):
            if p.is_file():
                files[f"acme/{name}/{p.relative_to(root / name).as_posix()}"] = p.read_bytes()
    for key in [k for k in files if k.startswith("acme/tiny-llm/")]:
        files["acme/gated-llm/" + key.removeprefix("acme/tiny-llm/")] = files[key]
    return {"files": files, "counts": counts}


def inline(tmp_path: Path, hub: FakeHub, *args: str, stdin: str | None = None,
           **env_extra: str) -> subprocess.CompletedProcess[str]:  # fmt: skip
    env = dict(os.environ)
    for name in ("HF_HUB_OFFLINE", "HF_TOKEN"):
        env.pop(name, None)
    env.update({"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf-home"),
                "INLINE_MODELS_DIR": str(tmp_path / "models"),
                "INLINE_DATA_DIR": str(tmp_path / "data"), **env_extra})  # fmt: skip
    return subprocess.run([inline_exe(), *args], env=env, capture_output=True, text=True,
                          timeout=300, input=stdin)  # fmt: skip


def resolve_gets(hub: FakeHub, since: int) -> list[tuple[str, str, str | None]]:
    return [r for r in hub.requests[since:] if r[0] == "GET" and r[1]]


def test_import_lands_in_its_category_resumes_and_loads(tmp_path: Path, tiny_repos: dict,
                                                        pack_python: Path):  # fmt: skip
    files = tiny_repos["files"]
    with FakeHub(files, cut={"acme/tiny-llm/model.safetensors"}) as hub:
        llm = inline(tmp_path, hub, "models", "import", "hf:acme/tiny-llm")
        assert llm.returncode == 0, llm.stderr
        dest = tmp_path / "models" / "llm" / "tiny-llm"
        assert llm.stdout.strip() == str(dest)
        assert (dest / "model.safetensors").read_bytes() == files["acme/tiny-llm/model.safetensors"]
        assert (dest / "config.json").is_file() and (dest / "generation_config.json").is_file()
        # docs, pictures, git metadata, other weight formats, a consolidated original: skipped
        for skipped in ("README.md", ".gitattributes", "pytorch_model.bin", "assets", "original"):
            assert not (dest / skipped).exists(), skipped
        record = json.loads((dest / ".inline-source.json").read_text())
        assert record["source"] == "hf:acme/tiny-llm" and record["category"] == "llm"
        # the interrupted transfer resumed from where it stopped
        gets = [r for r in hub.requests if r[:2] == ("GET", "acme/tiny-llm/model.safetensors")]
        assert len(gets) >= 2 and gets[-1][2] is not None and gets[-1][2] != "bytes=0-"
        # never the hidden HF cache; staging cleaned up
        hf_home = tmp_path / "hf-home"
        assert not hf_home.exists() or not any(p.is_file() for p in hf_home.rglob("*"))
        assert not any((tmp_path / "models" / ".downloads").rglob("*.safetensors"))
        # a second import of the same revision downloads nothing
        before = len(hub.requests)
        again = inline(tmp_path, hub, "models", "import", "hf:acme/tiny-llm@main")
        assert again.returncode == 0 and "are present" in again.stderr
        fetched = [r for r in resolve_gets(hub, before) if r[1] != "acme/tiny-llm/config.json"]
        assert fetched == [] and not any(r[0] == "HEAD" for r in hub.requests[before:])

        pipe = inline(tmp_path, hub, "models", "import", "hf:acme/tiny-pipe")
        assert pipe.returncode == 0, pipe.stderr
        pdest = tmp_path / "models" / "diffusers" / "tiny-pipe"
        assert (pdest / "model_index.json").is_file()
        assert (pdest / "unet" / "diffusion_pytorch_model.safetensors").is_file()
        assert (pdest / "scheduler" / "scheduler_config.json").is_file()
        # the consolidated single file beside the component folders is skipped, as are docs
        assert not (pdest / "tiny-pipe-single-file.safetensors").exists()
        assert not (pdest / "README.md").exists() and not (pdest / "sample.jpg").exists()
    # both load with the real libraries, in a pack venv, offline
    proc = subprocess.run([str(pack_python), str(HERE / "_load_repos.py"), str(dest), str(pdest)],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert loaded["llmClass"] == "Qwen3ForCausalLM" and loaded["logits"] == [1, 3, 32768]
    assert loaded["pipeline"] == "DDPMPipeline" and loaded["image"] == [8, 8, 3]
    assert loaded["llm"] == tiny_repos["counts"]["llm"]


def test_estimate_equals_the_true_parameter_count_and_downloads_nothing(
    tmp_path: Path, tiny_repos: dict
):
    counts = tiny_repos["counts"]
    with FakeHub(tiny_repos["files"]) as hub:
        for repo, category, weights in (
            ("tiny-llm", "llm", ["acme/tiny-llm/model.safetensors"]),
            ("tiny-pipe", "diffusers", ["acme/tiny-pipe/unet/diffusion_pytorch_model.safetensors"]),
        ):
            before = len(hub.requests)
            proc = inline(tmp_path, hub, "models", "estimate", f"hf:acme/{repo}", "--json")
            assert proc.returncode == 0, proc.stderr
            est = json.loads(proc.stdout)
            key = "llm" if category == "llm" else "diffusers"
            assert est["params"] == counts[key] and est["category"] == category
            assert est["paramsByDtype"] == {"F32": counts[key]}
            assert est["bytesByDtype"] == {"F32": 4 * counts[key]}
            assert est["replica"]["gpus"] == 1 and est["replica"]["vramGb"] > 0
            assert est["replica"]["ramGb"] > 0 and "fits" in est["fit"]
            # one ranged read per weight file, never a whole weight file
            reads = [r for r in resolve_gets(hub, before) if r[1].endswith(".safetensors")]
            assert [r[1] for r in reads] == weights
            size = len(tiny_repos["files"][weights[0]])
            assert all(r[2] and r[2] != f"bytes=0-{size - 1}" for r in reads), reads
            # the same file list as the import: the consolidated single file is not counted
            assert [w["path"] for w in est["weightFiles"]] == [w.split("/", 2)[2] for w in weights]
        assert not (tmp_path / "models").exists()
        # a weight file without a safetensors header counts by its size
        both = inline(tmp_path, hub, "models", "estimate", "hf:acme/tiny-llm", "--json",
                      "--include", "*.safetensors", "--include", "pytorch_model.bin",
                      "--exclude", "original/*")  # fmt: skip
        assert both.returncode == 0, both.stderr
        by_path = {w["path"]: w for w in json.loads(both.stdout)["weightFiles"]}
        assert set(by_path) == {"model.safetensors", "pytorch_model.bin"}
        assert by_path["pytorch_model.bin"]["fromHeader"] is False
        assert by_path["model.safetensors"]["params"] == counts["llm"]
        text = inline(tmp_path, hub, "models", "estimate", "hf:acme/tiny-llm")
        assert text.returncode == 0 and f"{counts['llm']:,} parameters" in text.stdout
        # --exclude and INLINE_HF_IGNORE add to the ignore patterns; --include narrows
        plan = inline(tmp_path, hub, "models", "import", "hf:acme/tiny-llm", "--dry-run",
                      "--json", "--exclude", "generation_config.json",
                      INLINE_HF_IGNORE="config.json")  # fmt: skip
        assert plan.returncode == 0, plan.stderr
        assert [f["path"] for f in json.loads(plan.stdout)["files"]] == ["model.safetensors"]
        only = inline(tmp_path, hub, "models", "import", "hf:acme/tiny-llm", "--dry-run",
                      "--json", "--include", "*.json", "--as", "text-encoder")  # fmt: skip
        doc = json.loads(only.stdout)
        assert [f["path"] for f in doc["files"]] == ["config.json", "generation_config.json"]
        assert doc["dest"].endswith("models/text_encoders/tiny-llm")


def test_local_folder_estimate(tmp_path: Path, tiny_repos: dict):
    folder = tmp_path / "pipe"
    for key, data in tiny_repos["files"].items():
        if key.startswith("acme/tiny-pipe/unet/") or key == "acme/tiny-pipe/model_index.json":
            target = folder / key.removeprefix("acme/tiny-pipe/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    with FakeHub({}) as hub:
        proc = inline(tmp_path, hub, "models", "estimate", str(folder), "--json")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["params"] == tiny_repos["counts"]["diffusers"]
        assert hub.requests == []


def test_a_gated_repo_needs_a_token(tmp_path: Path, tiny_repos: dict):
    with FakeHub(tiny_repos["files"], gated={"acme/gated-llm"}) as hub:
        proc = inline(tmp_path, hub, "models", "import", "hf:acme/gated-llm")
        assert proc.returncode == 1
        assert "hf:acme/gated-llm is a gated repo" in proc.stderr
        assert "HF_TOKEN" in proc.stderr and "--token-secret" in proc.stderr
        assert "Traceback" not in proc.stderr
        missing = inline(tmp_path, hub, "models", "import", "hf:acme/gated-llm",
                         "--token-secret", "HF_ACME")  # fmt: skip
        assert missing.returncode == 1 and "'HF_ACME' is not set" in missing.stderr
        wrong = inline(tmp_path, hub, "models", "estimate", "hf:acme/gated-llm",
                       HF_TOKEN="hf_wrong")  # fmt: skip
        assert wrong.returncode == 1 and "your token has no access" in wrong.stderr
        stored = inline(tmp_path, hub, "secrets", "set", "HF_ACME", stdin=hub.token + "\n")
        assert stored.returncode == 0, stored.stderr
        ok = inline(tmp_path, hub, "models", "import", "hf:acme/gated-llm",
                    "--token-secret", "HF_ACME")  # fmt: skip
        assert ok.returncode == 0, ok.stderr
        assert (tmp_path / "models" / "llm" / "gated-llm" / "model.safetensors").is_file()
        assert hub.token not in ok.stdout + ok.stderr
        env_ok = inline(tmp_path, hub, "models", "estimate", "hf:acme/gated-llm",
                        HF_TOKEN=hub.token)  # fmt: skip
        assert env_ok.returncode == 0, env_ok.stderr


def test_bad_sources_are_named(tmp_path: Path, tiny_repos: dict):
    with FakeHub(tiny_repos["files"]) as hub:
        for source, message in (
            ("acme/tiny-llm", "names no source"),
            ("hf:acme", "the repo must be ORG/NAME"),
            ("hf:acme/nothing", "hf:acme/nothing: no such repo"),
            ("hf:acme/tiny-llm@nope", "has no revision 'nope'"),
        ):
            proc = inline(tmp_path, hub, "models", "import", source)
            assert proc.returncode == 2 and message in proc.stderr, (source, proc.stderr)
            assert "Traceback" not in proc.stderr
