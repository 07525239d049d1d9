"""uv, driven as a subprocess: resolve with hashes, create venvs, sync them exactly, build wheels.

Every call gets the same environment: the host's venv does not leak in, pip's find-links folder
is mapped to uv's (uv does not read pip's settings), and a failure becomes ``EnvBuildFailed``
carrying uv's own output (the reason a resolution failed is in it).

Installs byte-compile what they install (``--compile-bytecode``): a worker never compiles its
imports again, which matters where ``PYTHONDONTWRITEBYTECODE=1`` is set (many container images):
there, every worker start would recompile diffusers and torch's Python sources.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from ._errors import EnvBuildFailed

_found: str | None = None
_finding = threading.Lock()


def uv_binary() -> str:
    """The uv executable (the ``uv`` package's own binary, else the one on PATH), found once.

    Found under a lock: ``find_uv_bin`` reads ``sysconfig``, whose first use is not
    thread-safe on Python 3.11 (a thread that comes second sees a half-filled table, and
    ``get_config_var("EXE")`` is None), and two pack venvs built at once on a host's first
    render both ask here first.
    """
    global _found
    with _finding:
        if _found is None:
            _found = _find_uv()
        return _found


def _find_uv() -> str:
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if found is None:
            raise EnvBuildFailed("*", "find uv", "uv is not installed: pip install uv") from None
        return found


def find_links() -> str | None:
    """Where extra wheels lie, comma-separated as uv reads it (uv does not read pip's settings,
    so pip's whitespace-separated ``PIP_FIND_LINKS`` is mapped)."""
    raw = os.environ.get("UV_FIND_LINKS") or os.environ.get("PIP_FIND_LINKS")
    if not raw:
        return None
    return ",".join(find_links_list(raw))


def find_links_list(raw: str | None = None) -> list[str]:
    """The find-links locations, one per item."""
    if raw is None:
        raw = os.environ.get("UV_FIND_LINKS") or os.environ.get("PIP_FIND_LINKS") or ""
    return [item for item in raw.replace(",", " ").split() if item]


def uv_env() -> dict[str, str]:
    """The environment uv runs in: no host venv, find-links mapped, no hidden constraints."""
    drop = ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT", "UV_CONSTRAINT", "UV_OVERRIDE")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    links = find_links()
    if links:
        env["UV_FIND_LINKS"] = links
    return env


def run_uv(pack: str, step: str, args: Sequence[str], *, cwd: Path | None = None) -> str:
    """Run ``uv ARGS``; its output, or ``EnvBuildFailed`` with that output."""
    proc = subprocess.run(
        [uv_binary(), *args],
        env=uv_env(),
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise EnvBuildFailed(pack, step, proc.stdout + proc.stderr)
    return proc.stdout


def compile_requirements(
    pack: str,
    requirements_in: Path,
    *,
    constraints: Sequence[Path],
    overrides: Path | None,
    cwd: Path | None = None,
    refresh: bool = False,
) -> str:
    """Resolve ``requirements_in`` for the host's interpreter: pinned lines with every hash.

    ``refresh`` reads the index afresh instead of from uv's cache.
    """
    args = [
        "pip", "compile", "--quiet", "--generate-hashes", "--no-header", "--no-annotate",
        "--python", sys.executable, str(requirements_in),
    ]  # fmt: skip
    if refresh:
        args.append("--refresh")
    for path in constraints:
        args += ["--constraint", str(path)]
    if overrides is not None:
        args += ["--override", str(overrides)]
    return run_uv(pack, "resolve the dependencies", args, cwd=cwd)


def create_venv(pack: str, venv: Path) -> None:
    """A fresh venv for the host's interpreter at ``venv`` (relocatable: built in staging, then
    moved into place)."""
    args = ["venv", "--quiet", "--relocatable", "--python", sys.executable, str(venv)]
    run_uv(pack, "create the venv", args)


SYNC_STEP = "install the locked dependencies"


def index_moved(err: EnvBuildFailed) -> bool:
    """Whether a sync failed because a pinned version is not on the index as uv sees it now
    (the index changed since the pins were resolved, or a cached page of it is stale)."""
    return err.step == SYNC_STEP and "No solution found" in err.output


def unavailable_pins(err: EnvBuildFailed) -> list[str]:
    """The pins a failed sync could not find, as constraints that leave them out
    (``name!=version``): what a second resolution must not choose again."""
    found = re.findall(r"no version of ([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s,]+)", err.output)
    return sorted({f"{name}!={version}" for name, version in found})


def sync_locked(pack: str, venv: Path, locked: Path) -> None:
    """Make ``venv`` hold exactly the hashed requirements of ``locked`` (hashes checked).

    A pin the index does not show is asked for once more with the index read afresh: uv's
    cached copy of a package's page can be older than the one the pins came from.
    """
    python = str(venv / "bin" / "python")
    args = ["pip", "sync", "--quiet", "--require-hashes", "--compile-bytecode", "--python", python,
            str(locked)]  # fmt: skip
    try:
        run_uv(pack, SYNC_STEP, args)
    except EnvBuildFailed as err:
        if not index_moved(err):
            raise
        run_uv(pack, SYNC_STEP, [*args, "--refresh"])


def install_no_deps(pack: str, venv: Path, targets: Sequence[str]) -> None:
    """Install ``targets`` (paths, wheels, ``-e`` lines) into ``venv`` without resolving."""
    if not targets:
        return
    python = str(venv / "bin" / "python")
    args = ["pip", "install", "--quiet", "--no-deps", "--compile-bytecode", "--python", python]
    for target in targets:
        args += target.split(" ", 1) if target.startswith("-e ") else [target]
    run_uv(pack, "install the pack", args)


def build_wheel(pack: str, project: Path, out_dir: Path) -> Path:
    """Build ``project`` into one wheel in ``out_dir`` (its build backend runs isolated)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    before = set(out_dir.glob("*.whl"))
    run_uv(
        pack,
        "build the pack's wheel",
        # not --quiet: a failing build backend's own message is what the user needs to see
        ["build", "--wheel", "--no-create-gitignore", "--out-dir", str(out_dir), str(project)],
    )  # fmt: skip
    built = sorted(set(out_dir.glob("*.whl")) - before)
    if len(built) != 1:
        raise EnvBuildFailed(pack, "build the pack's wheel", f"expected one wheel, got {built}")
    return built[0]


def freeze(venv: Path) -> list[str]:
    """What ``venv`` holds, one ``name==version`` (or ``name @ url``) line each, sorted."""
    python = str(venv / "bin" / "python")
    out = run_uv(venv.parent.name, "list the venv", ["pip", "freeze", "--python", python])
    return sorted(line.strip() for line in out.splitlines() if line.strip())
