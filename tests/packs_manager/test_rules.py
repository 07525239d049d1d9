"""The SDK gate, the platform pins, local sources, names and node id ownership."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from pathlib import Path

import pytest
from inline_registry import (
    EnvBuildFailed,
    NodeConflict,
    PackInvalid,
    SdkMismatch,
    load_registry,
    read_lock,
)
from inline_registry._rules import sdk_gate
from inline_sdk import SDK_VERSION
from uv import find_uv_bin

from ._host import run_text
from ._packs import build_wheel, write_pack

MAJOR = int(SDK_VERSION.split(".")[0])


def test_a_pack_pinned_to_sdk_1_0_installs_and_runs_on_this_1_x_host(manager, data_dir, tmp_path):
    src = write_pack(tmp_path / "old", "old", deps=["inline-sdk==1.0.0"])
    result = manager.install(str(src))
    record = read_lock(data_dir / "packs.lock").packs["old"].current
    assert record.sdk_requirement == "1.0.0"  # what it was built against
    assert result.sdk_version == SDK_VERSION  # what its worker speaks: this host's 1.x
    assert run_text(data_dir, tmp_path, "old/say") == "old 0.1.0"


@pytest.mark.parametrize(
    ("deps", "manifest", "built_for"),
    [
        (["inline-sdk>=2,<3"], "", "2"),
        (["inline-sdk==2.0.0"], "", "2.0.0"),
        (["inline-sdk>=1,<2"], '[tool.inline]\nsdk = "2"\n', "2 ([tool.inline] sdk)"),
    ],
)
def test_a_pack_for_another_sdk_major_is_refused_naming_both(
    deps, manifest, built_for, manager, data_dir, tmp_path
):
    src = write_pack(tmp_path / "next", "next", deps=deps, tool_inline=manifest)
    with pytest.raises(SdkMismatch) as info:
        manager.install(str(src))
    message = str(info.value)
    assert f"built for inline-sdk {built_for}" in message
    assert f"this host speaks inline-sdk {SDK_VERSION}" in message
    assert not (data_dir / "packs.lock").exists()


def test_the_sdk_gate_reads_specifiers():
    assert sdk_gate("p", ["inline-sdk>=1.0,<2"]) == "1.0"
    assert sdk_gate("p", ["inline-sdk~=1.0"]) == "1.0"
    assert sdk_gate("p", ["inline-sdk"]) == "1.0"
    with pytest.raises(SdkMismatch, match="upgrade Inline"):
        sdk_gate("p", [f"inline-sdk>={MAJOR}.99"])
    with pytest.raises(PackInvalid, match="does not depend on inline-sdk"):
        sdk_gate("p", ["pillow"])


def test_a_dependency_that_wants_another_torch_fails_resolution_with_the_reason(
    manager, tmp_path, monkeypatch
):
    house = tmp_path / "house"
    dep = write_pack(tmp_path / "dep", "dep", deps=["torch==1.0.0"], dist="inline-fixture-oldtorch")
    build_wheel(dep, house)
    monkeypatch.setenv("UV_FIND_LINKS", f"{house},/opt/wheels")
    src = write_pack(tmp_path / "tp", "tp", deps=["inline-sdk>=1,<2", "inline-fixture-oldtorch"])
    with pytest.raises(EnvBuildFailed) as info:
        manager.install(str(src))
    message = str(info.value)
    assert "resolve the dependencies" in message
    assert "torch==1.0.0" in message and "torch==2.13.0" in message


def test_local_sources_only_when_the_operator_allows_them(manager, data_dir, tmp_path):
    lib = write_pack(tmp_path / "lib", "lib", dist="inline-fixture-lib")
    src = write_pack(
        tmp_path / "uses", "uses", deps=["inline-sdk>=1,<2", f"inline-fixture-lib @ {lib.as_uri()}"]
    )
    with pytest.raises(Exception, match="local file URL"):
        manager.install(str(src))
    result = manager.install(str(src), allow_local_sources=True)
    record = read_lock(data_dir / "packs.lock").packs["uses"].current
    assert result.version == "0.1.0" and record.allow_local_sources
    assert any("inline-fixture-lib" in line for line in record.local)


@pytest.mark.parametrize("name", ["input", "load", "sample", "alibaba", "x"])
def test_reserved_and_malformed_names_are_refused(name, manager, tmp_path):
    src = write_pack(tmp_path / "p", name, node_id=f"{name}/say")
    with pytest.raises(PackInvalid, match=r"reserved|2-64 characters"):
        manager.install(str(src))


def test_two_packs_claiming_one_id_are_refused_naming_both(
    manager, data_dir, tmp_path, monkeypatch
):
    linked = write_pack(tmp_path / "dev", "acme-dev", node_id="acme/say")
    monkeypatch.setenv("INLINE_PACK_PATHS", str(linked))
    load_registry(data_dir / "packs")  # builds the linked pack's venv and caches its nodes
    src = write_pack(tmp_path / "acme", "acme")
    with pytest.raises(NodeConflict) as info:
        manager.install(str(src))
    assert info.value.packs == ("acme-dev", "acme")
    assert "'acme/say' is declared by both pack 'acme-dev' and pack 'acme'" in str(info.value)

    # installed first, then a linked pack claims the same id: the registry refuses the second
    monkeypatch.delenv("INLINE_PACK_PATHS")
    manager.install(str(src))
    monkeypatch.setenv("INLINE_PACK_PATHS", str(linked))
    registry = load_registry(data_dir / "packs")
    assert registry.lookup("acme/say").pack == "acme-dev"
    assert "both pack 'acme-dev' and pack 'acme'" in registry.failed["acme"]


def _sdk_1_0_wheel(out: Path) -> Path:
    """The real inline-sdk 1.0.0, built from the commit of this repository that released it."""
    root = Path(__file__).resolve().parents[2]
    found = subprocess.run(
        ["git", "log", "--format=%H", "-S", 'SDK_VERSION: Final = "1.0.0"', "--",
         "sdk/src/inline_sdk/_version.py"],
        cwd=root, capture_output=True, text=True,
    )  # fmt: skip
    commits = found.stdout.split()
    if found.returncode != 0 or not commits:
        pytest.skip("this checkout has no git history holding inline-sdk 1.0.0")
    tree = out / "sdk-1.0.0"
    tree.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "archive", commits[-1], "sdk"], cwd=root, capture_output=True, check=True
    )
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tf:
        tf.extractall(tree, filter="data")
    return build_wheel(tree / "sdk", out / "wheels")


def test_a_worker_running_the_real_sdk_1_0_serves_this_host(manager, data_dir, tmp_path):
    wheel = _sdk_1_0_wheel(tmp_path)
    result = manager.install(str(write_pack(tmp_path / "old", "old", deps=["inline-sdk==1.0.0"])))
    root = data_dir / "packs" / "old" / result.dir
    subprocess.run(
        [find_uv_bin(), "pip", "install", "--quiet", "--no-deps", "--reinstall",
         "--python", str(root / "venv" / "bin" / "python"), str(wheel)],
        check=True,
    )  # fmt: skip
    for cached in root.glob("welcome-*.json"):
        cached.unlink()  # handshake again, with the 1.0 worker
    assert run_text(data_dir, tmp_path, "old/say", {"wait": 0.01}) == "old 0.1.0"
    (cached,) = root.glob("welcome-*.json")
    assert json.loads(cached.read_text())["sdk_version"] == "1.0.0"
