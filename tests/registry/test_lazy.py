"""Lazy pack venvs: a registry load builds none; a run builds only the packs it calls."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import msgspec
from inline_registry import (
    describe_unbuilt,
    ensure_env,
    env_for,
    load_registry,
    pack_sources,
    prepare_env,
    probe,
    read_pack_source,
)

from .test_envs import write_project

ROOT = Path(__file__).resolve().parents[2]
TESTPACK = ROOT / "tests" / "packs" / "testpack"


def built_venvs(packs_dir: Path) -> list[str]:
    """The packs whose venv is built under ``packs_dir``."""
    return sorted(p.parent.parent.name for p in packs_dir.glob("*/*/.ready"))


def test_loading_the_registry_builds_no_venv(tmp_path, monkeypatch):
    monkeypatch.setenv("INLINE_BUILTIN_PACKS", str(ROOT / "packs"))
    registry = load_registry(tmp_path / "packs", [TESTPACK])
    assert not registry.failed, registry.failed
    for node_type in ("input/text", "sample", "alibaba/z-image-turbo", "testpack/echo"):
        assert registry.lookup(node_type) is not None, node_type
    assert built_venvs(tmp_path / "packs") == []
    assert not any(info.env.ready for info in registry.packs.values())
    # The second load reads the cached descriptions: the same registry version.
    assert load_registry(tmp_path / "packs", [TESTPACK]).version == registry.version


def test_a_description_equals_the_worker_handshake(tmp_path):
    source = read_pack_source(TESTPACK, first_party=False)
    described = describe_unbuilt(env_for(source, tmp_path / "packs"))
    assert described is not None
    env = prepare_env(env_for(source, tmp_path / "packs"))
    assert env.ready and built_venvs(tmp_path / "packs") == ["testpack"]
    real = probe(env)
    assert described.pack_version == real.pack_version
    assert msgspec.json.encode(described.descriptors) == msgspec.json.encode(real.descriptors)


def test_a_pack_importing_a_dependency_at_import_is_built_at_load(tmp_path, monkeypatch):
    # PIL: a dependency the pack declares (not the SDK's), imported at import: refused by the guard
    body = "import msgspec.json\nimport PIL\n"
    pack = write_project(
        tmp_path / "needy",
        "inline-pack-needy",
        "0.1.0",
        ["inline-sdk>=1,<2", "pillow>=10"],
        "inline_needy",
        body + "from inline_sdk import hookimpl\n\n@hookimpl\ndef inline_nodes():\n    return []\n",
        entry="needy",
    )
    source = read_pack_source(pack, first_party=False)
    assert describe_unbuilt(env_for(source, tmp_path / "packs")) is None
    monkeypatch.setenv("INLINE_BUILTIN_PACKS", str(tmp_path / "none"))
    registry = load_registry(tmp_path / "packs", [pack])
    assert not registry.failed, registry.failed
    assert registry.packs["needy"].env.ready  # built, then handshaken, as before


def test_build_true_builds_every_venv(tmp_path, monkeypatch):
    monkeypatch.setenv("INLINE_BUILTIN_PACKS", str(tmp_path / "none"))
    registry = load_registry(tmp_path / "packs", [TESTPACK], build=True)
    assert registry.packs["testpack"].env.ready
    assert ensure_env(read_pack_source(TESTPACK, first_party=False), tmp_path / "packs").ready


def test_inline_run_of_input_text_builds_only_the_basics_venv(tmp_path):
    """`inline run graph.json` on a fresh data dir: one venv (basics), not all of them."""
    graph = {
        "graph": {
            "schemaVersion": 1,
            "nodes": [{"id": "t", "type": "input/text", "params": {"text": "hello"}}],
        },
        "target": "t",
    }
    (tmp_path / "g.json").write_text(json.dumps(graph))
    env = {**os.environ, "INLINE_DATA_DIR": str(tmp_path / "data")}
    env.pop("INLINE_PACK_PATHS", None)
    proc = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "inline"), "run", "g.json", "--out", "out"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "t.text.txt").read_text() == "hello"
    assert built_venvs(tmp_path / "data" / "packs") == ["basics"]
    # said once: when the first-use venv is being built, and when it is ready
    assert proc.stderr.count("Preparing the venv of pack 'basics' (first use)...") == 1
    assert proc.stderr.count("The venv of pack 'basics' is ready (") == 1
    names = {s.name for s in pack_sources()}
    assert {"basics", "primitives", "zimage"} <= names
