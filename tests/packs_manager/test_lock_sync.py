"""The lock records exact pins with hashes; ``sync`` and ``rollback`` rebuild venvs from it."""

from __future__ import annotations

import hashlib
import shutil
import subprocess

import pytest
from inline_registry import PackManager, load_registry, read_lock
from uv import find_uv_bin

from ._host import run_text
from ._packs import build_wheel, write_pack

DEP_BODY = "VERSION = '{text}'\n"
USES_DEP = """
import importlib.metadata as md
from typing import Annotated
from inline_sdk import Context, NodeSpec, Output, hookimpl, node

@node("{node_id}", title="Dep", category="Test")
def say(ctx: Context) -> Annotated[str, Output("text", "Text")]:
    return "{text} with dep " + md.version("inline-fixture-dep")

@hookimpl
def inline_nodes() -> list[NodeSpec]:
    return [say]
"""


@pytest.fixture
def wheelhouse(tmp_path, monkeypatch):
    """A find-links folder holding inline-fixture-dep 1.0.0 (a package no index has)."""
    house = tmp_path / "house"
    dep = write_pack(tmp_path / "dep1", "dep", "1.0.0", body=DEP_BODY, dist="inline-fixture-dep")
    build_wheel(dep, house)
    monkeypatch.setenv("UV_FIND_LINKS", f"{house},/opt/wheels")
    return house


def freeze(venv) -> list[str]:
    out = subprocess.run(
        [find_uv_bin(), "pip", "freeze", "--python", str(venv / "bin" / "python")],
        capture_output=True,
        text=True,
        check=True,
    )
    return sorted(line for line in out.stdout.splitlines() if "==" in line)


def test_lock_pins_with_hashes_and_sync_rebuilds_exactly(
    wheelhouse, manager: PackManager, data_dir, tmp_path
):
    src = write_pack(
        tmp_path / "user", "user", deps=["inline-sdk>=1,<2", "inline-fixture-dep"], body=USES_DEP
    )
    result = manager.install(str(src))
    version = read_lock(data_dir / "packs.lock").packs["user"].current
    dep = next(d for d in version.dependencies if d.name == "inline-fixture-dep")
    wheel = next(wheelhouse.glob("inline_fixture_dep-1.0.0-*.whl"))
    assert dep.version == "1.0.0"
    assert dep.hashes == (f"sha256:{hashlib.sha256(wheel.read_bytes()).hexdigest()}",)
    venv = data_dir / "packs" / "user" / result.dir / "venv"
    before = freeze(venv)
    assert "inline-fixture-dep==1.0.0" in before

    # a newer dependency appears: the lock still says 1.0.0, and sync installs exactly that
    newer = write_pack(tmp_path / "dep2", "dep", "2.0.0", body=DEP_BODY, dist="inline-fixture-dep")
    build_wheel(newer, wheelhouse)
    shutil.rmtree(venv)
    registry = load_registry(data_dir / "packs")
    assert "inline pack sync" in registry.failed["user"]
    assert [r.action for r in manager.sync()] == ["rebuilt"]
    assert freeze(venv) == before
    assert run_text(data_dir, tmp_path, "user/say") == "user 0.1.0 with dep 1.0.0"

    # a venv changed by hand is put back as the lock says
    subprocess.run(
        [find_uv_bin(), "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"),
         "--find-links", str(wheelhouse), "inline-fixture-dep==2.0.0"],
        check=True,
    )  # fmt: skip
    assert [r.action for r in manager.sync()] == ["rebuilt"]
    assert freeze(venv) == before
    assert [r.action for r in manager.sync()] == ["ok"]

    # the lock cannot be satisfied by anything else: a wheel whose hash changed is refused
    wheel.unlink()
    tampered = write_pack(
        tmp_path / "dep3", "dep", "1.0.0", body="VERSION = 'evil'\n", dist="inline-fixture-dep"
    )
    build_wheel(tampered, wheelhouse)
    shutil.rmtree(venv)
    subprocess.run([find_uv_bin(), "cache", "clean", "inline-fixture-dep"], capture_output=True)
    with pytest.raises(Exception, match=r"(?i)hash"):
        manager.sync()


def test_rollback_rebuilds_a_missing_previous_venv_from_the_lock(manager, data_dir, tmp_path):
    src = write_pack(tmp_path / "acme", "acme", "0.1.0")
    first = manager.install(str(src))
    write_pack(src, "acme", "0.2.0")
    manager.install(str(src))
    shutil.rmtree(data_dir / "packs" / "acme" / first.dir / "venv")
    back = manager.rollback("acme")
    assert back.version == "0.1.0"
    assert (data_dir / "packs" / "acme" / first.dir / "venv" / "bin" / "python").exists()
    assert run_text(data_dir, tmp_path, "acme/say") == "acme 0.1.0"
