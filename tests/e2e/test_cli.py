"""The ``inline`` command, run as a user would, in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ._graphs import n, png_size, request
from .conftest import ROOT, inline_exe


def inline(args: list[str], env: dict[str, str], cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [inline_exe(), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_run_renders_the_example_and_prints_the_paths(cli_env, tmp_path):
    out = tmp_path / "out"
    proc = inline(["run", "examples/basics.json", "--out", str(out)], cli_env)
    assert proc.returncode == 0, proc.stderr
    written = out / "thumb.image.png"
    assert proc.stdout.split() == [str(written)]
    assert png_size(written.read_bytes()) == (256, 160)
    assert "[2/2] thumb (image/resize)" in proc.stderr


def test_run_writes_text_outputs_and_honours_target(cli_env, tmp_path):
    proc = inline(
        ["run", "examples/basics.json", "--target", "prompt", "--out", str(tmp_path)], cli_env
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "prompt.text.txt").read_text() == "a red bicycle on a beach at sunrise"


def test_invalid_graph_exits_2_and_prints_every_error(cli_env, tmp_path):
    doc = request(
        "r",
        n("t", "input/text", {"text": "x"}),
        n("u", "acme/nothing"),
        n("r", "image/resize", {"width": 0, "height": 10_000}, image=("t", "text")),
        n("j", "text/join", {}, a=("ghost", "text")),
    )
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    proc = inline(["run", str(path)], cli_env)
    assert proc.returncode == 2
    err = proc.stderr
    for fragment in (
        "Unknown node type 'acme/nothing'.",
        "Cannot wire text into image at r.image.",
        "$.graph.nodes[2].params.width",
        "$.graph.nodes[2].params.height",
        "No node with id 'ghost'.",
        "Join Text needs an input wired to 'B'.",
    ):
        assert fragment in err, fragment


def test_failed_run_exits_1_with_the_node_error(cli_env, tmp_path):
    path = tmp_path / "fail.json"
    path.write_text(json.dumps(request("f", n("f", "testpack/fail", {"message": "no luck"}))))
    proc = inline(["run", str(path), "--out", str(tmp_path)], cli_env)
    assert proc.returncode == 1
    assert "node 'f' (testpack/fail) failed: ValueError: no luck" in proc.stderr
    assert "Traceback" in proc.stderr


def test_assets_add_then_render_from_the_asset_id(cli_env, tmp_path):
    proc = inline(["assets", "add", str(ROOT / "examples" / "assets" / "sunrise.png")], cli_env)
    assert proc.returncode == 0, proc.stderr
    asset_id = proc.stdout.strip()
    assert asset_id.startswith("sha256-") and len(asset_id) == 71
    again = inline(["assets", "add", str(ROOT / "examples" / "assets" / "sunrise.png")], cli_env)
    assert again.stdout.strip() == asset_id  # content-addressed, idempotent
    doc = request(
        "r",
        n("i", "input/image", {"asset": {"ref": "asset", "id": asset_id}}),
        n("r", "image/resize", {"width": 32, "height": 20}, image=("i", "image")),
    )
    path = tmp_path / "asset.json"
    path.write_text(json.dumps(doc))
    proc = inline(["run", str(path), "--out", str(tmp_path / "o")], cli_env)
    assert proc.returncode == 0, proc.stderr
    assert png_size((tmp_path / "o" / "r.image.png").read_bytes()) == (32, 20)


def test_bad_inputs_are_clear_errors_naming_them(cli_env, tmp_path):
    not_image = tmp_path / "notes.png"
    not_image.write_text("just text")
    outside = Path("/etc/hostname")
    cases = {
        "sha256-" + "0" * 64: "No asset 'sha256-" + "0" * 64 + "'",
        str(not_image): f"'{not_image}' is not a readable image",
        str(outside): "is outside the allowed input roots",
    }
    for value, expected in cases.items():
        ref = (
            {"ref": "asset", "id": value}
            if value.startswith("sha256-")
            else {"ref": "path", "path": value}
        )
        path = tmp_path / "in.json"
        path.write_text(json.dumps(request("i", n("i", "input/image", {"asset": ref}))))
        proc = inline(["run", str(path), "--out", str(tmp_path)], cli_env)
        # a path outside the roots is refused before anything runs (issue 10): invalid, exit 2
        assert proc.returncode == (2 if value == str(outside) else 1), value
        assert expected in proc.stderr, proc.stderr
    path.write_text(json.dumps(request("i", n("i", "input/image"))))
    proc = inline(["run", str(path)], cli_env)
    assert "An image input node needs a valid asset reference." in proc.stderr


def test_the_cli_process_never_imports_torch(cli_env, tmp_path):
    code = (
        "import importlib.abc, sys\n"
        "seen = []\n"
        "class F(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'diffusers', 'transformers'):\n"
        "            seen.append(name)\n"
        "sys.meta_path.insert(0, F())\n"
        "from inline_host.cli import main\n"
        f"rc = main(['run', 'examples/basics.json', '--out', {str(tmp_path)!r}])\n"
        "print('RESULT', rc, seen)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "RESULT 0 []" in proc.stdout, proc.stdout + proc.stderr


def test_run_prints_a_streamed_text_target_as_it_arrives(cli_env, tmp_path):
    gate = tmp_path / "gate"
    doc = tmp_path / "stream.json"
    params = {"words": 6, "hold_after": 3, "gate": str(gate)}
    doc.write_text(json.dumps(request("s", n("s", "testpack/stream", params))))
    proc = subprocess.Popen(
        [inline_exe(), "run", str(doc), "--out", str(tmp_path / "out")],
        env=cli_env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        head = b""
        while head != "wörd0\nw1 w2 ".encode():  # the words before the gate, printed already
            chunk = proc.stdout.read1(64)
            assert chunk, proc.stderr.read().decode() if proc.stderr else ""
            head += chunk
        gate.write_text("go")  # the node is held until now: nothing was printed at the end
        rest, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err.decode()
    written = tmp_path / "out" / "s.text.txt"
    assert (head + rest).decode() == f"wörd0\nw1 w2 wörd3\nw4 w5 \n{written}\n"
    assert written.read_text() == "wörd0\nw1 w2 wörd3\nw4 w5 "
