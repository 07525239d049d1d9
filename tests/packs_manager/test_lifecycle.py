"""Install (folder, wheel, index name, git tag), upgrade, rollback and remove, through the host."""

from __future__ import annotations

import json
import shutil

import pytest
from inline_registry import PackManager, PackNotInstalled, SourceUnavailable, read_lock
from inline_sdk import SDK_VERSION

from ._host import run_text, served_types
from ._packs import build_wheel, git, write_pack


def test_folder_install_upgrade_rollback_remove(manager: PackManager, data_dir, tmp_path, steps):
    src = write_pack(tmp_path / "src" / "acme", "acme", "0.1.0")
    first = manager.install(str(src))
    assert (first.name, first.version, first.node_types) == ("acme", "0.1.0", ("acme/say",))
    assert first.sdk_version == SDK_VERSION and first.previous is None
    phases = [s.phase for s in steps]
    for phase in ("fetch", "validate", "scan", "build", "resolve", "install", "handshake"):
        assert phase in phases
    assert phases[-1] == "activate"
    assert run_text(data_dir, tmp_path, "acme/say") == "acme 0.1.0"

    # the lock: exact pins with hashes, the pack's wheel and its sha256
    lock = json.loads((data_dir / "packs.lock").read_text())
    v1 = lock["packs"]["acme"]["versions"][first.dir]
    assert {d["name"] for d in v1["dependencies"]} >= {"msgspec", "pluggy"}
    assert all(h.startswith("sha256:") for d in v1["dependencies"] for h in d["hashes"])
    assert all(d["hashes"] for d in v1["dependencies"])
    assert len(v1["wheel_sha256"]) == 64 and v1["source"]["kind"] == "folder"
    version_dir = data_dir / "packs" / "acme" / first.dir
    assert (version_dir / "scan.json").is_file() and (version_dir / "venv").is_dir()
    assert not (version_dir / "source" / ".git").exists()

    write_pack(src, "acme", "0.2.0")
    second = manager.upgrade("acme")
    assert (second.version, second.previous) == ("0.2.0", first.dir)
    assert run_text(data_dir, tmp_path, "acme/say") == "acme 0.2.0"
    assert (data_dir / "packs" / "acme" / first.dir / "venv").is_dir()  # kept for rollback
    again = manager.upgrade("acme")
    assert not again.changed  # nothing new in the folder

    back = manager.rollback("acme")
    assert (back.version, back.previous) == ("0.1.0", second.dir)
    assert run_text(data_dir, tmp_path, "acme/say") == "acme 0.1.0"
    rows = {(r.name, r.version): r for r in manager.list()}
    assert rows["acme", "0.1.0"].state == "active"
    assert rows["acme", "0.2.0"].state.startswith("previous")
    assert rows["acme", "0.1.0"].size_bytes > 0
    assert rows["acme", "0.1.0"].node_types == ("acme/say",)
    forward = manager.rollback("acme")  # a rollback of the rollback returns to 0.2.0
    assert forward.version == "0.2.0"

    manager.remove("acme")
    assert "acme" not in read_lock(data_dir / "packs.lock").packs
    assert not (data_dir / "packs" / "acme").exists()
    assert "acme/say" not in served_types(data_dir, tmp_path)
    with pytest.raises(PackNotInstalled, match="'acme' is not installed"):
        manager.rollback("acme")


def test_a_third_version_prunes_the_oldest(manager: PackManager, data_dir, tmp_path):
    src = tmp_path / "acme"
    dirs = []
    for version in ("0.1.0", "0.2.0", "0.3.0"):
        write_pack(src, "acme", version)
        dirs.append(manager.install(str(src)).dir)
    kept = sorted(p.name for p in (data_dir / "packs" / "acme").iterdir() if p.is_dir())
    assert kept == sorted(dirs[1:])


def test_wheel_install_and_upgrade_to_sibling_wheels(manager: PackManager, data_dir, tmp_path):
    house = tmp_path / "house"
    for version in ("0.1.0", "0.2.0"):
        write_pack(tmp_path / version, "whl", version)
        build_wheel(tmp_path / version, house)
    first = manager.install(str(house / "inline_pack_whl-0.1.0-py3-none-any.whl"))
    assert first.version == "0.1.0"
    assert manager.upgrade("whl").version == "0.2.0"  # the newest wheel next to it
    assert manager.upgrade("whl", to="0.1.0").version == "0.1.0"
    assert run_text(data_dir, tmp_path, "whl/say") == "whl 0.1.0"
    with pytest.raises(SourceUnavailable, match=r"no version 9\.9\.9"):
        manager.upgrade("whl", to="9.9.9")


def test_name_equals_version_from_the_find_links_folder(manager, data_dir, tmp_path, monkeypatch):
    house = tmp_path / "house"
    write_pack(tmp_path / "p", "idx", "0.4.0")
    build_wheel(tmp_path / "p", house)
    monkeypatch.setenv("UV_FIND_LINKS", f"{house},/opt/wheels")
    result = manager.install("inline-pack-idx==0.4.0")
    assert (result.name, result.version) == ("idx", "0.4.0")
    record = read_lock(data_dir / "packs.lock").packs["idx"].current
    assert (record.source.kind, record.source.location) == ("index", "inline-pack-idx==0.4.0")


def test_git_repository_at_a_tag_exported_without_git_or_hooks(manager, data_dir, tmp_path):
    repo = tmp_path / "repo"
    write_pack(repo, "gitpack", "0.1.0")
    git(repo, "init", "-q")
    hook = repo / ".git" / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\ntouch {tmp_path / 'hook-ran'}\n")
    hook.chmod(0o755)
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "one")
    git(repo, "tag", "v0.1.0")
    write_pack(repo, "gitpack", "0.2.0")
    git(repo, "commit", "-q", "-am", "two")
    git(repo, "tag", "v0.2.0")
    write_pack(repo, "gitpack", "0.3.0.dev0")
    git(repo, "commit", "-q", "-am", "three (untagged)")

    url = repo.as_uri()
    first = manager.install(url, ref="v0.1.0")
    assert first.version == "0.1.0"
    record = read_lock(data_dir / "packs.lock").packs["gitpack"].current
    assert record.source.kind == "git" and record.source.ref == "v0.1.0"
    assert record.source.commit == git(repo, "rev-parse", "v0.1.0")
    source = data_dir / "packs" / "gitpack" / first.dir / "source"
    assert (source / "pyproject.toml").is_file() and not (source / ".git").exists()
    assert not (tmp_path / "hook-ran").exists()

    assert manager.upgrade("gitpack").version == "0.2.0"  # a tag follows the newest tag
    assert manager.upgrade("gitpack", to="0.1.0").version == "0.1.0"  # --to finds v0.1.0
    assert manager.install(url, ref="main").version == "0.3.0.dev0"
    assert manager.install(url, ref="latest").version == "0.2.0"
    assert manager.install(url, ref=git(repo, "rev-parse", "v0.1.0")).version == "0.1.0"
    assert manager.install(url, ref="v0.2.0").version == "0.2.0"
    assert run_text(data_dir, tmp_path, "gitpack/say") == "gitpack 0.2.0"
    with pytest.raises(SourceUnavailable, match="no tag, branch or commit named 'v9'"):
        manager.install(url, ref="v9")
    shutil.rmtree(data_dir / "packs" / ".cache")  # the mirror is only a cache
    assert manager.upgrade("gitpack", to="0.1.0").version == "0.1.0"
