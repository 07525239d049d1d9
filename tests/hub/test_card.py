"""The model card an import writes (``inline.json``): source, settings and the estimated
requirements, with every field's origin; an edit survives a re-import and a new estimate."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from inline_host.hub import card_after_import, estimate_into_card, origin_of, read_card


def weights(folder: Path, params: int, name: str = "model.safetensors") -> None:
    """A real safetensors file of ``params`` bf16 zeros."""
    tensor = {"dtype": "BF16", "shape": [params], "data_offsets": [0, 2 * params]}
    header = json.dumps({"w": tensor})
    raw = header.encode()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(2 * params))


def llm(folder: Path, params: int = 4096) -> Path:
    weights(folder, params)
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    (folder / "generation_config.json").write_text(json.dumps({"temperature": 0.6, "eos": 2}))
    return folder


def test_a_fresh_import_writes_the_whole_card_with_origins(tmp_path: Path):
    folder = llm(tmp_path / "tiny")
    card = card_after_import(folder, "hf:acme/tiny", "main", "llm")
    assert card is not None and card == read_card(folder)
    assert (card["source"], card["revision"], card["category"]) == ("hf:acme/tiny", "main", "llm")
    assert card["task"] == "llm" and card["compile"] is False
    assert card["generation"]["temperature"] == 0.6  # the repo's own, over the pack's default
    assert card["generation"]["max_new_tokens"] == 512
    req = card["requirements"]
    assert req["params"] == 4096 and req["devices"] == 1 and req["vram_gb"] > 0 < req["ram_gb"]
    assert origin_of(card, "source") == "import"
    assert origin_of(card, "requirements.vram_gb") == "estimate"
    assert not list(folder.glob(".*.tmp"))  # written whole, no temp left


def test_an_edit_survives_a_reimport_and_a_new_estimate(tmp_path: Path):
    folder = llm(tmp_path / "tiny")
    card_after_import(folder, "hf:acme/tiny", None, "llm")
    card = read_card(folder)
    card["requirements"]["vram_gb"] = 40.0
    card["compile"] = True
    card["max_total_tokens"] = 256  # a pack's key, never Inline's
    (folder / "inline.json").write_text(json.dumps(card))
    weights(folder, 8192)  # the weights changed: the estimate's own values follow
    card_after_import(folder, "hf:acme/tiny", "v2", "llm")
    card = read_card(folder)
    assert card["requirements"]["vram_gb"] == 40.0 and card["compile"] is True
    assert card["max_total_tokens"] == 256 and card["revision"] == "v2"
    assert card["requirements"]["params"] == 8192
    assert origin_of(card, "requirements.vram_gb") == "user"
    assert origin_of(card, "compile") == "user"
    assert origin_of(card, "requirements.params") == "estimate"
    estimate_into_card(folder, "llm")  # and once more, the estimate alone
    card = read_card(folder)
    assert card["requirements"]["vram_gb"] == 40.0
    assert origin_of(card, "requirements.vram_gb") == "user"


def test_an_edit_back_to_the_old_value_is_still_an_edit(tmp_path: Path):
    folder = llm(tmp_path / "tiny")
    card_after_import(folder, "hf:acme/tiny", None, "llm")
    card = read_card(folder)
    written = card["requirements"]["ram_gb"]
    card["requirements"]["ram_gb"] = written + 1
    (folder / "inline.json").write_text(json.dumps(card))
    estimate_into_card(folder, "llm")  # sees the edit, marks it the user's
    card = read_card(folder)
    card["requirements"]["ram_gb"] = written
    (folder / "inline.json").write_text(json.dumps(card))
    weights(folder, 1 << 20)
    card = estimate_into_card(folder, "llm")
    assert card is not None and card["requirements"]["ram_gb"] == written


def test_a_card_that_is_not_json_is_left_alone(tmp_path: Path, caplog):
    folder = llm(tmp_path / "tiny")
    (folder / "inline.json").write_text("{not json")
    assert card_after_import(folder, "hf:acme/tiny", None, "llm") is None
    assert (folder / "inline.json").read_text() == "{not json"
    assert "inline.json is not readable JSON" in caplog.text


def test_a_folder_without_weights_gets_its_source_but_no_requirements(tmp_path: Path):
    folder = tmp_path / "empty"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    assert card_after_import(folder, "file:/x", None, "vae") is None
    card = read_card(folder)
    assert card["source"] == "file:/x" and "requirements" not in card
    assert "generation" not in card  # only text models get generation defaults
