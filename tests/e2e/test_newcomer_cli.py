"""Issue 11, what a newcomer meets with the ``inline`` command: the command, what it prints."""

from __future__ import annotations

import json
from pathlib import Path

from ._graphs import n, png_size, request
from .conftest import ROOT
from .test_cli import inline

SUNRISE = ROOT / "examples" / "assets" / "sunrise.png"


def graph_file(folder: Path, *nodes: dict, target: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "graph.json"
    path.write_text(json.dumps(request(target, *nodes)))
    return path


def image_from(path: str) -> dict:
    return n("i", "input/image", {"asset": {"ref": "path", "path": path}})


def test_path_refs_resolve_against_the_graph_files_folder(cli_env, tmp_path):
    project = tmp_path / "project"
    (project / "assets").mkdir(parents=True)
    (project / "assets" / "in.png").write_bytes(SUNRISE.read_bytes())
    resize = n("r", "image/resize", {"width": 32, "height": 20}, image=("i", "image"))
    doc = graph_file(project, image_from("assets/in.png"), resize, target="r")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = inline(["run", str(doc), "--out", str(tmp_path / "o")], cli_env, cwd=elsewhere)
    assert proc.returncode == 0, proc.stderr
    assert png_size((tmp_path / "o" / "r.image.png").read_bytes()) == (32, 20)


def test_a_missing_input_file_is_refused_before_anything_runs(cli_env, tmp_path):
    doc = graph_file(tmp_path / "g", image_from("missing.png"), target="i")
    proc = inline(["run", str(doc), "--out", str(tmp_path / "o")], cli_env)
    assert proc.returncode == 2  # the graph names a file that is not there: invalid, not run
    missing = tmp_path / "g" / "missing.png"
    assert f"input file '{missing}' cannot be read: No such file or directory" in proc.stderr
    assert "[node 'i'] at $.graph.nodes[0].params.asset" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "o").exists()


def test_a_bad_asset_id_and_an_unreadable_asset_are_one_line_each(cli_env, tmp_path):
    missing = "sha256-" + "0" * 64
    bad = n("i", "input/image", {"asset": {"ref": "asset", "id": missing}})
    proc = inline(["run", str(graph_file(tmp_path / "a", bad, target="i"))], cli_env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: node 'i' (input/image): No asset '{missing}': upload it first (inline assets add)"
    )
    doc = str(graph_file(tmp_path / "a", bad, target="i"))
    debug = inline(["--debug", "run", doc], cli_env)  # the remote traceback, on demand
    assert debug.returncode == 1 and "Traceback (most recent call last)" in debug.stderr
    assert "Traceback" in inline(["run", doc], {**cli_env, "INLINE_DEBUG": "1"}).stderr
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "notes.png").write_text("just text")
    proc = inline(
        ["run", str(graph_file(tmp_path / "b", image_from("notes.png"), target="i"))], cli_env
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"'{tmp_path / 'b' / 'notes.png'}' is not a readable image (expected PNG" in proc.stderr


def test_out_pointing_at_an_existing_file_is_refused_before_anything_runs(cli_env, tmp_path):
    taken = tmp_path / "taken.png"
    taken.write_bytes(b"x")
    doc = graph_file(tmp_path / "g", n("t", "input/text", {"text": "hi"}), target="t")
    proc = inline(["run", str(doc), "--out", str(taken)], cli_env)
    assert proc.returncode == 2
    assert proc.stderr == (
        f"error: --out {taken} is an existing file, not a folder: name a folder (it is created)\n"
    )


def test_a_node_bug_keeps_its_traceback(cli_env, tmp_path):
    doc = graph_file(tmp_path / "g", n("f", "testpack/fail", {"message": "no luck"}), target="f")
    proc = inline(["run", str(doc), "--out", str(tmp_path)], cli_env)
    assert proc.returncode == 1
    assert "node 'f' (testpack/fail) failed: ValueError: no luck" in proc.stderr
    assert "Traceback (most recent call last)" in proc.stderr


def test_a_misspelled_param_is_refused_with_the_suggestion(cli_env, tmp_path):
    doc = graph_file(tmp_path / "g", n("t", "input/text", {"txt": "hi"}), target="t")
    proc = inline(["run", str(doc)], cli_env)
    assert proc.returncode == 2
    assert (
        "Unknown param 'txt' (at $.graph.nodes[0].params.txt). Did you mean 'text'?" in proc.stderr
    )


def test_assets_add_applies_the_apis_rules(cli_env, tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    proc = inline(["assets", "add", str(tmp_path / "notes.txt")], cli_env)
    assert proc.returncode == 1
    assert proc.stderr == (
        f"error: {tmp_path / 'notes.txt'}: Unsupported media: the file is not a PNG, JPEG, WebP, "
        "GIF, MP4/MOV, WebM/MKV, AVI, WAV, MP3, Ogg, FLAC or M4A file (it looks like text).\n"
    )
    (tmp_path / "empty.png").write_bytes(b"")
    proc = inline(["assets", "add", str(tmp_path / "empty.png")], cli_env)
    assert (proc.returncode, proc.stderr) == (
        1,
        f"error: {tmp_path / 'empty.png'}: The file is empty.\n",
    )
    proc = inline(["assets", "add", str(SUNRISE)], cli_env)
    assert proc.returncode == 0 and proc.stdout.startswith("sha256-")


def test_inline_nodes_lists_every_type_with_pack_ports_and_params(cli_env):
    proc = inline(["nodes"], cli_env)
    assert proc.returncode == 0, proc.stderr
    assert (
        "image/resize  [basics]  Resize Image\n"
        "    inputs:  image (image)\n"
        "    outputs: image (image)\n"
        "    params:  width=512 (min 1, max 8192, step 1), height=512 (min 1, max 8192, step 1)\n"
    ) in proc.stdout
    for node_type in ("input/text", "sample", "alibaba/z-image-turbo", "testpack/echo"):
        assert f"\n{node_type}  [" in "\n" + proc.stdout, node_type
    listed = json.loads(inline(["nodes", "--json"], cli_env).stdout)
    resize = next(d for d in listed if d["type"] == "image/resize")
    assert resize["pack"] == "basics" and [p["default"] for p in resize["params"]] == [512, 512]


def test_inline_nodes_type_shows_one_descriptor_or_suggests(cli_env):
    proc = inline(["nodes", "image/resize"], cli_env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("image/resize: Resize Image\n  pack:     basics (node version")
    assert "    width=512 (min 1, max 8192, step 1)  -- Width\n" in proc.stdout
    proc = inline(["nodes", "image/resise"], cli_env)
    assert proc.returncode == 2
    assert proc.stderr.endswith(
        "error: unknown node type 'image/resise'. Did you mean 'image/resize'?\n"
    )


def inline_chunk(png: bytes) -> dict:
    """The JSON of a PNG's ``inline`` iTXt chunk."""
    import struct

    pos = 8
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        if png[pos + 4 : pos + 8] == b"iTXt":
            body = png[pos + 8 : pos + 8 + length]
            key, _, rest = body.partition(b"\x00")
            if key == b"inline":
                return json.loads(rest[4:].decode())
        pos += 12 + length
    raise AssertionError("no inline iTXt chunk")


def test_pngs_written_by_inline_run_carry_the_inline_chunk(cli_env, tmp_path):
    proc = inline(["run", "examples/basics.json", "--out", str(tmp_path)], cli_env)
    assert proc.returncode == 0, proc.stderr
    recipe = inline_chunk((tmp_path / "thumb.image.png").read_bytes())
    assert set(recipe) == {"node", "type", "params", "graph"}  # what API takes carry
    assert (recipe["node"], recipe["type"]) == ("thumb", "image/resize")
    assert recipe["params"] == {"width": 256, "height": 160}
    assert [n["id"] for n in recipe["graph"]["nodes"]][-1] == "thumb"
