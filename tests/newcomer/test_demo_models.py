"""``inline demo models``: tiny random-weight models of every family, built by the packs' shipped
builders in their own venvs, marked as demo, idempotent; and ``inline models import --as NAME``
with the README's model ids equal to what its import commands produce."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest

from ..importers.test_importers import env, fake_hub, inline
from ..models._hub import FakeHub
from ._demo_env import ROOT, DemoModels, demo_data, demo_models, run_inline

__all__ = ("demo_data", "demo_models", "env", "fake_hub")  # fixtures, for pytest to find here

# the session builds every first-party pack venv and the demo models first
pytestmark = pytest.mark.timeout(3600)

FAMILIES = {
    "llm": ["llm/demo-qwen3"],
    "seq2seq": ["llm/demo-t5"],
    "embed": ["embeddings/demo-embed"],
    "zimage": ["diffusion_models/demo_z_image_turbo.safetensors", "vae/demo_ae.safetensors",
               "text_encoders/demo_qwen3.safetensors", "text_encoders/demo_qwen3_tokenizer",
               "loras/demo_lora.safetensors"],
    "diffusers": ["diffusers/demo-sd", "checkpoints/demo-sd.safetensors"],
}  # fmt: skip


def card_of(path: Path) -> dict[str, object]:
    card = path / "inline.json" if path.is_dir() else path.with_name(f"{path.name}.inline.json")
    return json.loads(card.read_text())


def test_every_family_is_written_and_marked_demo(demo_models: DemoModels) -> None:
    models = demo_models.models
    for family, entries in FAMILIES.items():
        for entry in entries:
            path = models / entry
            assert path.exists(), f"{family}: {entry} missing; stderr: {demo_models.stderr}"
            card = card_of(path)
            assert card["demo"] is True and card["source"] == "inline demo models", card
            assert card["task"] == family and card["category"] == entry.split("/")[0]
        assert f"{family}: written ({', '.join(entries)})" in demo_models.stderr
    # real model folders, by the files their loaders read
    assert (models / "llm/demo-qwen3/config.json").is_file()
    assert (models / "llm/demo-qwen3/tokenizer.json").is_file()
    assert (models / "diffusers/demo-sd/model_index.json").is_file()
    assert (models / "embeddings/demo-embed/modules.json").is_file()
    # one progress line a step, each builder run in its pack's venv, nothing left staged
    for pack in ("text", "zimage", "diffusers"):
        assert f"building with pack '{pack}'" in demo_models.stderr
    assert "Traceback" not in demo_models.stderr
    assert not any((models / ".downloads" / "demo").glob("*"))
    print(f"inline demo models: {demo_models.seconds:.0f}s (venvs built before)")


def test_a_second_run_builds_nothing(demo_data: Path, demo_models: DemoModels) -> None:
    before = {p: p.stat().st_mtime_ns for p in demo_models.models.rglob("*")}
    proc = run_inline(demo_data, demo_models.models, "demo", "models", timeout=120)
    assert proc.returncode == 0, proc.stderr
    for family, entries in FAMILIES.items():
        assert f"{family}: present ({', '.join(entries)})" in proc.stderr
    assert "building" not in proc.stderr and "Preparing" not in proc.stderr
    assert "mesh/relief is geometry" in proc.stderr  # mesh loads no model: said, not written
    assert {p: p.stat().st_mtime_ns for p in demo_models.models.rglob("*")} == before


def test_only_names_one_family(demo_data: Path, demo_models: DemoModels, tmp_path: Path) -> None:
    one = run_inline(demo_data, demo_models.models, "demo", "models", "--only", "llm")
    assert one.returncode == 0, one.stderr
    assert one.stderr.strip().splitlines() == ["llm: present (llm/demo-qwen3)"]
    mesh = run_inline(demo_data, tmp_path / "models", "demo", "models", "--only", "mesh")
    assert mesh.returncode == 0 and "nothing to write" in mesh.stderr
    assert not (tmp_path / "models").exists()
    bad = run_inline(demo_data, tmp_path / "models", "demo", "models", "--only", "gpt")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) <= 2, bad.stderr  # the usage line, the error
    assert "invalid choice: 'gpt'" in bad.stderr and "llm" in bad.stderr


# inline models import --as NAME ------------------------------------------------------------------
def tiny_folder(root: Path) -> Path:
    """A model folder without torch: a Qwen3 config and one safetensors file (a header and 16
    bytes of float32)."""
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"],
                                                  "model_type": "qwen3"}))  # fmt: skip
    header = json.dumps({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}).encode()
    (root / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(16))
    return root


def test_import_as_gives_the_folder_its_name(tmp_path: Path) -> None:
    source = tiny_folder(tmp_path / "src" / "Qwen3-0.6B-finetune")
    data, models = tmp_path / "data", tmp_path / "models"
    proc = run_inline(data, models, "models", "import", f"file:{source}", "--as", "qwen3-0.6b",
                      timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    dest = models / "llm" / "qwen3-0.6b"
    assert proc.stdout.strip() == str(dest)
    assert (dest / "model.safetensors").is_file() and not (models / "llm" / source.name).exists()
    assert card_of(dest)["category"] == "llm"
    listed = run_inline(data, models, "models", "list", timeout=120)
    assert "qwen3-0.6b" in listed.stdout, listed.stdout + listed.stderr
    # a category word after --as is the category, as older scripts wrote it; --category too
    old = run_inline(data, models, "models", "import", str(source), "--as", "text-encoder",
                     "--dry-run", timeout=120)  # fmt: skip
    assert old.returncode == 0 and f"text-encoder -> {models}/text_encoders/{source.name}" in (
        old.stderr
    ), old.stderr
    both = run_inline(data, models, "models", "import", str(source), "--category", "llm",
                      "--as", "mine", "--dry-run", timeout=120)  # fmt: skip
    assert both.returncode == 0 and f"llm -> {models}/llm/mine" in both.stderr, both.stderr
    bad = run_inline(data, models, "models", "import", str(source), "--as", "../escape",
                     timeout=120)  # fmt: skip
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.startswith("error: --as ../escape:"), bad.stderr
    assert not (tmp_path / "escape").exists()


#: The model ids the README's code uses, beside hosted ones (``org/name``) and demo ones.
USED = re.compile(r"""(?:model=|complete\(|rewrite\()["']([A-Za-z0-9][\w.-]*)["']""")
IMPORT = re.compile(
    r"inline models import hf:[\w.-]+/([\w.-]+)(?:@\S+)?(?:[^\n#]*?--as ([\w.-]+))?"
)


def test_the_readme_model_ids_are_what_its_imports_produce() -> None:
    readme = (ROOT / "README.md").read_text()
    produced = {m.group(2) or m.group(1) for m in IMPORT.finditer(readme)}
    used = {m.group(1) for m in USED.finditer(readme)}
    assert {"qwen3-4b", "t5-small", "sdxl-turbo"} <= used  # the pattern sees the README's code
    missing = sorted(u for u in used if u not in produced and not u.startswith("demo-"))
    assert not missing, f"README uses model ids no documented import produces: {missing}"


def test_import_as_names_a_hub_repo_too(env: dict[str, str], fake_hub: FakeHub) -> None:
    proc = inline(env, "models", "import", "hf:acme/tiny-llm", "--as", "tiny")
    assert proc.returncode == 0, proc.stderr
    dest = Path(env["INLINE_MODELS_DIR"]) / "llm" / "tiny"
    assert proc.stdout.strip() == str(dest) and (dest / "model.safetensors").is_file()
    assert card_of(dest)["source"] == "hf:acme/tiny-llm"
    assert not (dest.parent / "tiny-llm").exists()
    plan = json.loads(inline(env, "models", "import", "hf:acme/tiny-llm", "--as", "other",
                             "--dry-run", "--json").stdout)  # fmt: skip
    assert plan["dest"] == str(dest.parent / "other")
