"""``inline import comfyui``: files written, reports printed, exit codes 0 / 3 / 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from inline_host.cli import main

DATA = Path(__file__).resolve().parents[1] / "data" / "comfyui"


@pytest.fixture(autouse=True)
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INLINE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)


def test_a_fully_mapped_workflow_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    out = tmp_path / "graph.json"
    code = main(
        ["import", "comfyui", str(DATA / "z_image_turbo_example.ui.json"), "--out", str(out)]
    )
    assert code == 0
    doc = json.loads(out.read_text())
    assert set(doc) == {"graph", "target", "outputNames"} and doc["target"] == "8"
    assert doc["outputNames"] == {"8": "ComfyUI"}  # its SaveImage's filename_prefix
    printed = capsys.readouterr().out
    assert "every executed node mapped" in printed and "KSampler" in printed


def test_unmapped_nodes_exit_3_and_still_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    name = "community/sd15_ipadapter_simple_custom_nodes.ui.json"
    code = main(["import", "comfyui", str(DATA / name), "--json"])
    assert code == 3
    printed = json.loads(capsys.readouterr().out)
    assert (
        {"graph", "target", "report"}
        <= set(printed)
        <= {"graph", "target", "report", "outputNames"}
    )
    assert "IPAdapter" in {u["classType"] for u in printed["report"]["unmapped"]}
    assert (tmp_path / "sd15_ipadapter_simple_custom_nodes.inline.json").is_file()


def test_run_stops_at_the_report_of_an_incomplete_import(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    name = "community/sd15_ipadapter_simple_custom_nodes.ui.json"
    code = main(["import", "comfyui", str(DATA / name), "--run", "--outputs", str(tmp_path / "o")])
    assert code == 3
    captured = capsys.readouterr()
    assert "IPAdapter" in captured.out  # the report, then why nothing ran
    graph = "sd15_ipadapter_simple_custom_nodes.inline.json"
    assert captured.err.strip() == (
        f"not running: the import is incomplete (see the report above); edit {graph} or map the "
        f"missing nodes, then run it with: inline run {graph}"
    )
    assert not (tmp_path / "o").exists()  # nothing ran, no venv was built for it


def test_outputs_are_named_after_the_save_image_prefix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """A request's ``outputNames`` (what the importer writes from ``SaveImage``) names the
    target's files as ComfyUI does: numbered, never overwritten, subfolders kept, never
    outside ``--out``."""
    examples = Path(__file__).resolve().parents[2] / "examples"
    doc = json.loads((examples / "basics.json").read_text())
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "sunrise.png").write_bytes(
        (examples / "assets" / "sunrise.png").read_bytes()
    )
    doc["outputNames"] = {"thumb": "../shots/sunrise"}
    graph = tmp_path / "named.json"
    graph.write_text(json.dumps(doc))
    out = tmp_path / "out"
    for n in (1, 2):
        assert main(["run", str(graph), "--out", str(out)]) == 0, capsys.readouterr().err
        printed = capsys.readouterr().out.strip()
        assert printed == str(out / "shots" / f"sunrise_{n:05}_.png")
    assert sorted(p.name for p in (out / "shots").iterdir()) == [
        "sunrise_00001_.png",
        "sunrise_00002_.png",
    ]


def test_one_click(tmp_path: Path):
    out = tmp_path / "z.json"
    png = DATA / "community" / "zimage_turbo_lora_dangling.embedded.png"
    assert main(["import", "comfyui", str(png), "--one-click", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["graph"]["nodes"][-1]["type"] == "alibaba/z-image-turbo"


def test_not_a_workflow_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert main(["import", "comfyui", str(DATA / "README.md")]) == 2
    assert "not a ComfyUI workflow" in capsys.readouterr().err
    assert main(["import", "comfyui", str(tmp_path / "missing.json")]) == 2


def test_run_imports_with_the_packs_mappings_and_renders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    """``--run`` on a prompt using testpack's mapping (``inline_comfyui_mappings``)."""
    monkeypatch.setenv("INLINE_PACK_PATHS", str(Path(__file__).parents[1] / "packs" / "testpack"))
    prompt = {
        "1": {"class_type": "PrimitiveString", "inputs": {"value": "hello"}},
        "2": {"class_type": "TestEchoText", "inputs": {"text": ["1", 0], "suffix": "!"}},
    }
    src = tmp_path / "echo.api.json"
    src.write_text(json.dumps(prompt))
    code = main(["import", "comfyui", str(src), "--run", "--outputs", str(tmp_path / "out")])
    assert code == 0, capsys.readouterr()
    assert (tmp_path / "out" / "2.text.txt").read_text() == "hello!"
