"""``inline pack ...`` as a person uses it: scaffold, install, run; progress, errors, --help."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ._packs import write_pack

ROOT = Path(__file__).resolve().parents[2]
INLINE = str(ROOT / ".venv" / "bin" / "inline")


def inline(*args: str, env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [INLINE, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )


@pytest.fixture
def env(data_dir: Path, tmp_path: Path) -> dict[str, str]:
    e = dict(os.environ)
    e.update(
        {
            "INLINE_DATA_DIR": str(data_dir),
            "INLINE_MODELS_DIR": str(tmp_path / "models"),
            "INLINE_INPUT_ROOTS": str(tmp_path),
        }
    )
    return e


def test_new_demo_installs_and_runs_unchanged(env, tmp_path):
    made = inline("pack", "new", "demo", "--dir", str(tmp_path), env=env)
    assert made.returncode == 0, made.stderr
    root = tmp_path / "demo"
    assert made.stdout.strip() == str(root)
    for rel in ("pyproject.toml", "README.md", "tests/test_hello.py"):
        assert (root / rel).is_file()

    # the scaffold's own test passes with the Python that runs Inline
    test = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(root / "tests")],
        env={**env, "PYTHONPATH": str(root / "src")},
        cwd=root,
        capture_output=True,
        text=True,
    )
    assert test.returncode == 0, test.stdout + test.stderr

    installed = inline("pack", "install", str(root), env=env)
    assert installed.returncode == 0, installed.stderr
    assert "installed demo 0.1.0" in installed.stdout
    assert "nodes: demo/hello" in installed.stdout
    assert "[1/8] fetch" in installed.stderr and "[8/8] activate" in installed.stderr

    listed = inline("pack", "list", "--json", env=env)
    (row,) = [r for r in json.loads(listed.stdout) if r["name"] == "demo"]
    assert row["nodes"] == ["demo/hello"] and row["state"] == "active"
    assert row["version"] == "0.1.0" and row["sdk"].startswith("1.") and row["venvBytes"] > 0

    graph = {
        "graph": {
            "schemaVersion": 1,
            "nodes": [{"id": "hi", "type": "demo/hello", "params": {"name": "Ada"}}],
        },
        "target": "hi",
    }
    (tmp_path / "hello.json").write_text(json.dumps(graph))
    ran = inline("run", str(tmp_path / "hello.json"), "--out", str(tmp_path / "out"), env=env)
    assert ran.returncode == 0, ran.stderr
    assert (tmp_path / "out" / "hi.text.txt").read_text() == "Hello, Ada!"


def test_errors_say_why_and_consent_has_its_exit_code(env, tmp_path):
    src = write_pack(
        tmp_path / "tool", "tool", files={"src/inline_pack_tool/x.py": "import subprocess\n"}
    )
    refused = inline("pack", "install", str(src), env=env)
    assert refused.returncode == 3
    assert "--allow subprocess" in refused.stderr and "x.py:1" in refused.stderr
    ok = inline("pack", "install", str(src), "--allow", "subprocess", env=env)
    assert ok.returncode == 0, ok.stderr
    assert "consents: subprocess" in ok.stdout

    missing = inline("pack", "rollback", "tool", env=env)
    assert missing.returncode == 1
    assert "no previous version to roll back to" in missing.stderr
    assert "Nothing was changed" in missing.stderr
    unknown = inline("pack", "remove", "nope", env=env)
    assert unknown.returncode == 1 and "Pack 'nope' is not installed" in unknown.stderr
    synced = inline("pack", "sync", env=env)
    assert synced.returncode == 0 and "tool" in synced.stdout and "ok" in synced.stdout
    scan = inline("pack", "scan", str(src), env=env)
    assert scan.returncode == 0 and "subprocess" in scan.stdout


SECRET_NODE = """
from typing import Annotated
from inline_sdk import Context, NodeSpec, Output, Param, hookimpl, node

@node("keyed/ask", title="Ask", category="Test")
def ask(
    ctx: Context, *, api_key_secret: Annotated[str, Param("API key secret")] = "ACME_KEY"
) -> Annotated[str, Output("text", "Text")]:
    return "asked"

@hookimpl
def inline_nodes() -> list[NodeSpec]:
    return [ask]
"""


def test_install_shows_the_secrets_its_nodes_name_and_whether_they_are_granted(env, tmp_path):
    src = write_pack(tmp_path / "keyed", "keyed", body=SECRET_NODE)
    installed = inline("pack", "install", str(src), env=env)
    assert installed.returncode == 0, installed.stderr
    assert (
        "  secret ACME_KEY (keyed/ask api_key_secret): not granted; its nodes get it only "
        "after: inline secrets grant ACME_KEY keyed\n"
    ) in installed.stdout
    stored = subprocess.run(
        [INLINE, "secrets", "set", "ACME_KEY"], input="v\n", env=env, capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert stored.returncode == 0, stored.stderr
    assert inline("secrets", "grant", "ACME_KEY", "keyed", env=env).returncode == 0
    write_pack(tmp_path / "keyed", "keyed", "0.2.0", body=SECRET_NODE)
    upgraded = inline("pack", "upgrade", "keyed", env=env)
    assert upgraded.returncode == 0, upgraded.stderr
    assert "  secret ACME_KEY (keyed/ask api_key_secret): granted\n" in upgraded.stdout


@pytest.mark.parametrize(
    "command",
    ["install", "upgrade", "rollback", "remove", "list", "sync", "new", "scan", "enable"],
)
def test_every_command_has_help(command, env):
    shown = inline("pack", command, "--help", env=env)
    assert shown.returncode == 0 and "usage: inline pack" in shown.stdout
