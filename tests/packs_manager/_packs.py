"""Throwaway packs, wheels and git repositories, built inside the tests."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from uv import find_uv_bin

NODE = """
import time
from typing import Annotated
from inline_sdk import Context, NodeSpec, Output, Param, hookimpl, node

@node("{node_id}", title="Say", category="Test")
def say(
    ctx: Context, *, wait: Annotated[float, Param("Wait")] = 0.0
) -> Annotated[str, Output("text", "Text")]:
    time.sleep(wait)
    return "{text}"

@hookimpl
def inline_nodes() -> list[NodeSpec]:
    return [say]
"""


def write_pack(
    root: Path,
    name: str,
    version: str = "0.1.0",
    *,
    text: str | None = None,
    deps: list[str] | None = None,
    node_id: str | None = None,
    body: str | None = None,
    tool_inline: str = "",
    files: dict[str, str] | None = None,
    dist: str | None = None,
) -> Path:
    """A pack project ``name`` at ``root`` whose node ``<name>/say`` returns ``text``."""
    module = "inline_pack_" + name.replace("-", "_")
    dist = dist or f"inline-pack-{name}"
    deps = ["inline-sdk>=1.0,<2"] if deps is None else deps
    root.mkdir(parents=True, exist_ok=True)
    (root / "src" / module).mkdir(parents=True, exist_ok=True)
    code = body if body is not None else NODE
    code = code.replace("{node_id}", node_id or f"{name}/say")
    code = code.replace("{text}", text if text is not None else f"{name} {version}")
    (root / "src" / module / "__init__.py").write_text(code)
    dep_list = ", ".join(f'"{d}"' for d in deps)
    (root / "pyproject.toml").write_text(
        f'[project]\nname = "{dist}"\nversion = "{version}"\nrequires-python = ">=3.11"\n'
        f'license = "MIT"\ndependencies = [{dep_list}]\n\n'
        f'[project.entry-points."inline.packs"]\n{name} = "{module}"\n\n'
        '[build-system]\nrequires = ["uv_build>=0.8,<0.15"]\nbuild-backend = "uv_build"\n\n'
        f'[tool.uv.build-backend]\nmodule-name = "{module}"\n'
        + (f"\n{tool_inline}\n" if tool_inline else "")
    )
    for rel, content in (files or {}).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    return root


def build_wheel(project: Path, out: Path) -> Path:
    """Build ``project`` into ``out``; the wheel."""
    out.mkdir(parents=True, exist_ok=True)
    before = set(out.glob("*.whl"))
    subprocess.run(
        [find_uv_bin(), "build", "--quiet", "--wheel", "--out-dir", str(out), str(project)],
        check=True,
        capture_output=True,
    )
    (wheel,) = set(out.glob("*.whl")) - before
    return wheel


def git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.org",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.org",
    }
    out = subprocess.run(
        ["git", "-c", "init.defaultBranch=main", *args],
        cwd=repo,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


def tree_state(data_dir: Path) -> dict[str, object]:
    """Everything a pack operation may change: the lock's bytes and every path under packs/
    (the git mirror cache aside), with each file's size."""
    lock = data_dir / "packs.lock"
    state: dict[str, object] = {"lock": lock.read_bytes() if lock.exists() else None}
    packs = data_dir / "packs"
    for path in sorted(packs.rglob("*")) if packs.exists() else []:
        rel = path.relative_to(packs).as_posix()
        if rel.startswith(".cache") or rel.endswith(".lock") or "__pycache__" in rel:
            continue
        state[rel] = path.stat().st_size if path.is_file() and not path.is_symlink() else "d"
    return state
