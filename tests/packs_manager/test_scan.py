"""The static scan: each rule from a small source, severities, and consent through the manager."""

from __future__ import annotations

import json
import textwrap

import pytest
from inline_registry import PackManager, ScanRefused, scan_tree
from inline_registry._scan import RULES

from ._packs import write_pack

SNIPPETS = {
    "subprocess": "import subprocess\n",
    "subprocess ": "import os\nos.system('ls')\n",
    "ctypes": "from ctypes import CDLL\n",
    "raw-socket": "import socket\n",
    "pickle-deserialization": "import pickle\npickle.loads(b'')\n",
    "pickle-deserialization ": "import torch\ntorch.load('x.pt')\n",
    "dynamic-execution": "exec(input())\n",
    "dynamic-execution ": "import importlib\nimportlib.import_module(name)\n",
    "network-egress": "from urllib import request\n",
    "network-egress ": "import requests\n",
    "obfuscated-execution": "import base64\nexec(base64.b64decode('cHJpbnQoMSk='))\n",
    "obfuscated-execution ": "import zlib as z\neval(z.decompress(b''))\n",
    "unparseable-source": "def broken(:\n",
    "model-download": "from huggingface_hub import hf_hub_download\n",
}


@pytest.mark.parametrize("rule", list(SNIPPETS))
def test_each_rule_is_found_with_its_line(rule, tmp_path):
    (tmp_path / "LICENSE").write_text("MIT")
    (tmp_path / "mod.py").write_text(SNIPPETS[rule])
    report = scan_tree(tmp_path)
    found = {f.rule for f in report.findings}
    assert rule.strip() in found, report.render()
    finding = next(f for f in report.findings if f.rule == rule.strip())
    assert finding.path == "mod.py" and finding.line >= 1
    assert finding.severity == RULES[rule.strip()][0]


def test_clean_code_has_no_findings(tmp_path):
    (tmp_path / "LICENSE").write_text("MIT")
    (tmp_path / "mod.py").write_text(
        textwrap.dedent(
            """
            import json, pickle
            import numpy as np
            import torch
            data = json.loads("{}")
            blob = pickle.dumps(data)
            w = torch.load("w.pt", weights_only=True)
            a = np.load("a.npy")
            importlib_name = __import__("os")
            """
        )
    )
    assert scan_tree(tmp_path).findings == ()


def test_files_that_run_at_install_or_start_and_binaries(tmp_path):
    (tmp_path / "setup.py").write_text("")
    (tmp_path / "hack.pth").write_text("import os\n")
    (tmp_path / "lib.so").write_bytes(b"\x7fELF....")
    (tmp_path / "blob").write_bytes(b"\x7fELF\x02\x01")
    (tmp_path / "libcudart.so.12").write_bytes(b"\x7fELF")
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("")
    (tmp_path / "escape").symlink_to("/etc/passwd")
    (tmp_path / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["x"]\nbuild-backend = "custom"\nbackend-path = ["."]\n'
    )
    report = scan_tree(tmp_path)
    rules = {(f.rule, f.path) for f in report.findings}
    assert ("install-time-code-execution", "setup.py") in rules
    assert ("install-time-code-execution", "pyproject.toml") in rules
    assert ("startup-code", "hack.pth") in rules
    assert ("compiled-binary", "lib.so") in rules and ("compiled-binary", "blob") in rules
    assert ("bundled-native-runtime", "libcudart.so.12") in rules
    assert ("host-dependency-override", "torch") in rules
    assert ("unsafe-path", "escape") in rules
    assert ("build-backend", "pyproject.toml") in rules
    assert ("no-license", "pyproject.toml") in rules
    assert report.rules("critical") == [
        "bundled-native-runtime",
        "host-dependency-override",
        "install-time-code-execution",
        "startup-code",
        "unsafe-path",
    ]


def test_consent_is_asked_then_recorded_with_the_version(manager: PackManager, data_dir, tmp_path):
    src = write_pack(
        tmp_path / "tool",
        "tool",
        files={"src/inline_pack_tool/run.py": "import subprocess\nimport socket\n"},
    )
    with pytest.raises(ScanRefused) as info:
        manager.install(str(src), allow=["subprocess"])
    assert info.value.consent == ["raw-socket"] and not info.value.blocked
    assert "--allow raw-socket" in str(info.value)
    assert "src/inline_pack_tool/run.py:2" in str(info.value)

    result = manager.install(str(src), allow=["subprocess", "raw-socket"])
    assert result.scan is not None and result.scan.consents == ("raw-socket", "subprocess")
    kept = json.loads((data_dir / "packs" / "tool" / result.dir / "scan.json").read_text())
    assert kept["consents"] == ["raw-socket", "subprocess"]
    assert {f["rule"] for f in kept["findings"]} == {"subprocess", "raw-socket"}
    # an upgrade keeps the consents given; a new kind of finding needs a new one
    write_pack(src, "tool", "0.2.0", files={"src/inline_pack_tool/more.py": "import ctypes\n"})
    with pytest.raises(ScanRefused, match="--allow ctypes"):
        manager.upgrade("tool")
    assert manager.upgrade("tool", allow=["ctypes"]).version == "0.2.0"


def test_critical_findings_block_even_with_consent(manager: PackManager, tmp_path):
    src = write_pack(
        tmp_path / "sneaky",
        "sneaky",
        files={"src/inline_pack_sneaky/x.py": "import base64\nexec(base64.b64decode(b''))\n"},
    )
    with pytest.raises(ScanRefused) as info:
        manager.install(str(src), allow=list(RULES))
    assert info.value.blocked == ["obfuscated-execution"]
    assert "critical findings block the install" in str(info.value)
