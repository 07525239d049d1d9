"""Every way an install can fail leaves the previous state exactly as it was, and says why."""

from __future__ import annotations

from pathlib import Path

import pytest
from inline_registry import (
    EnvBuildFailed,
    HandshakeFailed,
    NodeIdRefused,
    PackInvalid,
    PackManager,
    RegistryError,
    RequirementsRefused,
    ScanRefused,
    SdkMismatch,
)
from inline_sdk import SDK_VERSION

from ._host import run_text
from ._packs import tree_state, write_pack

SDK_DEP = "inline-sdk>=1.0,<2"


def broken_module_name(root: Path) -> None:
    py = root / "pyproject.toml"
    py.write_text(
        py.read_text().replace('module-name = "inline_pack_acme"', 'module-name = "gone"')
    )


CASES = {
    "resolution": (
        dict(deps=[SDK_DEP, "inline-no-such-dependency-xyz==9.9.9"]),
        EnvBuildFailed,
        "inline-no-such-dependency-xyz",
    ),
    # the build backend's own message, not only which step failed
    "build": (dict(), EnvBuildFailed, "Expected a Python module at: "),
    "import error": (
        dict(body="raise ImportError('No module named fancy_dep_xyz')\n"),
        HandshakeFailed,
        "fancy_dep_xyz",
    ),
    "handshake (bad declaration)": (
        dict(
            body="from inline_sdk import hookimpl\n\n@hookimpl\ndef inline_nodes():\n"
            "    return ['not a node']\n"
        ),
        HandshakeFailed,
        "not a @node",
    ),
    "node id not owned": (dict(node_id="input/say"), NodeIdRefused, "must start with 'acme/'"),
    "manifest unknown keys": (
        dict(
            tool_inline='[tool.inline]\ncolour = "red"\n\n[tool.inline.nodes."acme/say"]\n'
            "enabeld = true\n"
        ),
        PackInvalid,
        "unknown key 'enabeld'",
    ),
    "manifest names a node the pack lacks": (
        dict(tool_inline='[tool.inline.nodes."acme/other"]\nenabled = true\n'),
        PackInvalid,
        'tool.inline.nodes."acme/other"',
    ),
    "syntax error": (
        dict(files={"src/inline_pack_acme/broken.py": "x = 1\ndef broken(:\n"}),
        PackInvalid,
        "fix src/inline_pack_acme/broken.py:2: ",
    ),
    "scan: critical": (
        dict(files={"setup.py": "import os\nos.system('echo hi')\n"}),
        ScanRefused,
        "install-time-code-execution",
    ),
    "scan: consent": (
        dict(files={"src/inline_pack_acme/run.py": "import subprocess\n"}),
        ScanRefused,
        "--allow subprocess",
    ),
    "sdk major": (dict(deps=["inline-sdk>=2,<3"]), SdkMismatch, f"inline-sdk {SDK_VERSION}"),
    "torch pin": (
        dict(deps=[SDK_DEP, "torch==1.0.0"]),
        RequirementsRefused,
        "the platform pins torch==2.13.0",
    ),
    "local source": (
        dict(deps=[SDK_DEP, "fancy @ file:///tmp/fancy"]),
        RequirementsRefused,
        "file://",
    ),
    "requirements -e": (
        dict(files={"requirements.txt": "-e ../elsewhere\n"}),
        RequirementsRefused,
        "editable install",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_failed_upgrade_changes_nothing(case, manager: PackManager, data_dir, tmp_path):
    src = write_pack(tmp_path / "acme", "acme", "0.1.0")
    manager.install(str(src))
    before = tree_state(data_dir)

    kwargs, error, message = CASES[case]
    write_pack(src, "acme", "0.2.0", **kwargs)
    if case == "build":
        broken_module_name(src)
    with pytest.raises(error) as info:
        manager.upgrade("acme")
    assert message in str(info.value)
    assert isinstance(info.value, RegistryError)
    assert tree_state(data_dir) == before
    assert not list((data_dir / "packs" / ".staging").iterdir())
    if case in ("import error", "torch pin"):
        assert run_text(data_dir, tmp_path, "acme/say") == "acme 0.1.0"


def test_a_failed_first_install_leaves_no_trace(manager: PackManager, data_dir, tmp_path):
    src = write_pack(tmp_path / "newbie", "newbie", body="raise RuntimeError('boom at import')\n")
    with pytest.raises(HandshakeFailed) as info:
        manager.install(str(src))
    assert "boom at import" in str(info.value) and "Traceback" in info.value.traceback
    assert tree_state(data_dir) == {"lock": None, ".staging": "d"}
