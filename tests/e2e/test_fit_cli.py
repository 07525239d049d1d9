"""``inline models fit``: the JSON answer and the exit code, on real-size sparse files."""

from __future__ import annotations

import json
import subprocess

from ..models._sparse import write_all
from .conftest import inline_exe


def fit(files, *flags):
    return subprocess.run(
        [inline_exe(), "models", "fit", *map(str, files), *flags, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_fit_prints_the_plan_and_exits_non_zero_when_it_wont_fit(tmp_path):
    files = sorted(write_all(tmp_path / "models").values())
    ok = fit(files, "--vram-gb", "24", "--ram-gb", "64")
    assert ok.returncode == 0, ok.stderr
    answer = json.loads(ok.stdout)
    assert answer["fits"] is True and answer["reason"]
    for c in answer["components"]:
        assert {"file", "params", "bytes", "plan"} <= set(c)
        assert set(c["plan"]) == {"device", "dtype", "quantization", "offload"}
        assert c["plan"]["quantization"] in ("none", "int8")
        assert c["plan"]["offload"] in ("resident", "model", "sequential")
    twelve = json.loads(fit(files, "--vram-gb", "12", "--ram-gb", "32").stdout)
    assert {c["plan"]["quantization"] for c in twelve["components"]} == {"int8", "none"}
    cpu = json.loads(fit(files, "--gpus", "0", "--ram-gb", "16").stdout)
    assert {c["plan"]["device"] for c in cpu["components"]} == {"cpu"}
    no = fit(files, "--vram-gb", "2", "--ram-gb", "4")
    assert no.returncode == 1
    assert json.loads(no.stdout)["fits"] is False
    assert "Won't fit" in json.loads(no.stdout)["reason"]


def test_fit_refuses_a_file_that_is_not_safetensors(tmp_path):
    bad = tmp_path / "x.safetensors"
    bad.write_bytes(b"not a header at all")
    out = fit([bad])
    assert out.returncode == 2 and "x.safetensors" in out.stderr
