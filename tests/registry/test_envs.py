"""Pack venvs: built from the host's SDK copy, honouring find-links and constraints."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from inline_registry import (
    NodeConflict,
    PackInvalid,
    ensure_env,
    load_registry,
    probe,
    read_pack_source,
    sdk_project_dir,
)
from uv import find_uv_bin

ROOT = Path(__file__).resolve().parents[2]


def write_project(
    path: Path,
    name: str,
    version: str,
    deps: list[str],
    module: str,
    body: str = "",
    entry: str | None = None,
) -> Path:
    (path / "src" / module).mkdir(parents=True)
    (path / "src" / module / "__init__.py").write_text(body)
    eps = f'\n[project.entry-points."inline.packs"]\n{entry} = "{module}"\n' if entry else ""
    (path / "pyproject.toml").write_text(
        f'[project]\nname = "{name}"\nversion = "{version}"\nrequires-python = ">=3.11"\n'
        f"dependencies = {deps!r}\n{eps}\n"
        '[build-system]\nrequires = ["uv_build>=0.8,<0.15"]\nbuild-backend = "uv_build"\n\n'
        f'[tool.uv.build-backend]\nmodule-name = "{module}"\n'.replace("'", '"')
    )
    return path


PACK_BODY = """
from typing import Annotated
from inline_sdk import Context, Output, hookimpl, node
import importlib.metadata as md

@node("{name}/dep-version", title="Dep version", category="Test")
def dep_version(ctx: Context) -> Annotated[str, Output("text", "Text")]:
    return md.version("inline-fixture-dep")

@hookimpl
def inline_nodes():
    return [dep_version]
"""


def dep_pack(tmp_path: Path, name: str) -> Path:
    """A pack ``name`` whose one node reports the version of ``inline-fixture-dep`` it got."""
    return write_project(
        tmp_path / name,
        f"inline-pack-{name}",
        "0.1.0",
        ["inline-sdk>=1,<2", "inline-fixture-dep"],
        f"inline_{name}",
        PACK_BODY.replace("{name}", name),
        entry=name,
    )


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A find-links folder with two versions of a package that exists on no index."""
    root = tmp_path_factory.mktemp("wheels")
    house = root / "house"
    for version in ("1.0.0", "2.0.0"):
        proj = write_project(
            root / version,
            "inline-fixture-dep",
            version,
            [],
            "inline_fixture_dep",
            f"VERSION = {version!r}\n",
        )
        subprocess.run(
            [find_uv_bin(), "build", "--quiet", "--wheel", "--out-dir", str(house), str(proj)],
            check=True,
        )
    return house


def test_find_links_and_constraints_from_the_environment_are_honoured(
    wheelhouse, tmp_path, monkeypatch
):
    pack = dep_pack(tmp_path, "pinned")
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("inline-fixture-dep==1.0.0\n")
    monkeypatch.setenv("UV_FIND_LINKS", str(wheelhouse))
    monkeypatch.setenv("INLINE_CONSTRAINTS", str(constraints))
    env = ensure_env(read_pack_source(pack, first_party=False), tmp_path / "packs")
    out = subprocess.run(
        [
            str(env.python),
            "-c",
            "import importlib.metadata as m;"
            "print(m.version('inline-fixture-dep'), m.distribution('inline-sdk').read_text("
            "'direct_url.json'))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    version, direct_url = out.stdout.split(" ", 1)
    assert version == "1.0.0"  # the constraint won over the newest wheel
    assert sdk_project_dir().as_uri() in direct_url  # the host's own SDK, never an index's
    welcome = probe(env)
    assert [d.type for d in welcome.descriptors] == ["pinned/dep-version"]
    assert welcome.pack_version == "0.1.0" and welcome.sdk_version.startswith("1.")
    # the same content reuses the venv; a changed pack builds a new one
    assert ensure_env(read_pack_source(pack, first_party=False), tmp_path / "packs") == env
    (pack / "src" / "inline_pinned" / "extra.py").write_text("X = 1\n")
    rebuilt = ensure_env(read_pack_source(pack, first_party=False), tmp_path / "packs")
    assert rebuilt.fingerprint != env.fingerprint


def test_a_failed_build_leaves_nothing_behind_and_says_why(tmp_path, monkeypatch):
    pack = write_project(
        tmp_path / "nodeps",
        "inline-pack-nodeps",
        "0.1.0",
        ["inline-sdk>=1,<2", "inline-no-such-dependency-xyz==9.9.9"],
        "inline_nodeps",
        "",
        entry="nodeps",
    )
    monkeypatch.setenv("UV_FIND_LINKS", str(tmp_path))
    with pytest.raises(Exception) as err:
        ensure_env(read_pack_source(pack, first_party=False), tmp_path / "packs")
    assert "nodeps" in str(err.value) and "inline-no-such-dependency-xyz" in str(err.value)
    assert not any(
        p.name.startswith(".") and "tmp" in p.name
        for p in (tmp_path / "packs" / "nodeps").iterdir()
    )


def test_a_folder_without_a_pack_entry_point_is_refused(tmp_path):
    proj = write_project(tmp_path / "plain", "plain", "0.1.0", [], "plain")
    with pytest.raises(PackInvalid, match=r"exactly one entry point in group 'inline\.packs'"):
        read_pack_source(proj, first_party=False)


def test_two_packs_claiming_one_node_id_conflict_naming_both(tmp_path, monkeypatch):
    body = PACK_BODY.replace("{name}", "dup").replace('md.version("inline-fixture-dep")', "'x'")
    one = write_project(
        tmp_path / "one",
        "inline-pack-one",
        "0.1.0",
        ["inline-sdk>=1,<2"],
        "inline_one",
        body,
        entry="one",
    )
    two = write_project(
        tmp_path / "two",
        "inline-pack-two",
        "0.1.0",
        ["inline-sdk>=1,<2"],
        "inline_two",
        body,
        entry="two",
    )
    monkeypatch.setenv("INLINE_BUILTIN_PACKS", str(tmp_path / "none"))
    reg = load_registry(tmp_path / "packs", [one, two])
    assert reg.lookup("dup/dep-version").pack == "one"
    assert "two" in reg.failed and "both pack 'one' and pack 'two'" in reg.failed["two"]
    assert NodeConflict.__name__ == "NodeConflict"


def test_registry_version_is_a_content_hash(tmp_path, monkeypatch):
    monkeypatch.setenv("INLINE_BUILTIN_PACKS", str(ROOT / "packs"))
    a = load_registry(tmp_path / "packs")
    b = load_registry(tmp_path / "packs")
    assert a.version == b.version and a.version.startswith("r_") and len(a.version) == 10
    assert a.lookup("input/text").descriptor.source == "builtin"
    assert sys.executable  # the venvs are built for the host's interpreter


def test_a_version_gone_from_the_index_between_resolve_and_install_is_resolved_again(
    wheelhouse, tmp_path, monkeypatch
):
    """The index resolving a pack and the one installing its pins can disagree (a release
    withdrawn in between, mirrors out of step): the first use resolves again without the
    version the install could not find, even where the resolving side still lists it."""
    import shutil

    from inline_registry import _envs

    house = tmp_path / "house"
    shutil.copytree(wheelhouse, house)
    pack = dep_pack(tmp_path, "moving")
    monkeypatch.setenv("UV_FIND_LINKS", str(house))
    monkeypatch.delenv("INLINE_CONSTRAINTS", raising=False)
    (newest,) = house.glob("inline_fixture_dep-2.0.0-*.whl")
    aside = tmp_path / newest.name
    shutil.copy(newest, aside)
    resolved: list[str] = []
    compile_for_real = _envs.compile_requirements

    def compile_then_withdraw(*args, **kwargs):
        shutil.copy(aside, newest)  # the resolving side lists 2.0.0 every time...
        text = compile_for_real(*args, **kwargs)
        resolved.append(text)
        newest.unlink()  # ...the installing side never has it
        return text

    monkeypatch.setattr(_envs, "compile_requirements", compile_then_withdraw)
    said: list[str] = []
    env = ensure_env(read_pack_source(pack, first_party=False), tmp_path / "packs", say=said.append)
    assert "inline-fixture-dep==2.0.0" in resolved[0]  # the newest, at first
    assert "inline-fixture-dep==1.0.0" in resolved[1]  # what the index still has
    assert any("changed while pack 'moving'" in line for line in said)
    welcome = probe(env)
    assert [d.type for d in welcome.descriptors] == ["moving/dep-version"]
    installed = subprocess.run(
        [
            str(env.python),
            "-c",
            "import importlib.metadata as m; print(m.version('inline-fixture-dep'))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert installed.stdout.strip() == "1.0.0"
    lock = (tmp_path / "packs.lock").read_text()
    assert "1.0.0" in lock and "2.0.0" not in lock  # the lock records what was installed
