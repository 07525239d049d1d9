"""Pack venvs: one uv venv per pack and content fingerprint, built atomically, cheap via uv's cache.

Every venv gets the host's own copy of inline-sdk (an override, so a look-alike on a package index
can never be picked), honours ``UV_FIND_LINKS`` / ``PIP_FIND_LINKS`` and a constraints file
(``INLINE_CONSTRAINTS`` or ``UV_CONSTRAINT``) so that CPU machines never pull a CUDA torch.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import inline_sdk

from ._errors import EnvBuildFailed, PackInvalid

READY: Final = ".ready"
SKIP_DIRS: Final = frozenset(
    {"__pycache__", ".venv", ".git", ".pytest_cache", ".ruff_cache", "build", "dist"}
)


@dataclass(frozen=True, slots=True)
class PackSource:
    """A pack project on disk: its entry-point name and folder."""

    name: str
    path: Path
    first_party: bool


@dataclass(frozen=True, slots=True)
class PackEnv:
    """A built pack venv."""

    source: PackSource
    fingerprint: str
    root: Path

    @property
    def python(self) -> Path:
        """The venv's interpreter."""
        return self.root / "venv" / "bin" / "python"

    @property
    def descriptors_file(self) -> Path:
        """Where the handshake's answer is cached (keyed by this env's fingerprint)."""
        return self.root / "welcome.json"


def read_pack_source(path: Path, *, first_party: bool) -> PackSource:
    """A ``PackSource`` from a pack project folder; raises ``PackInvalid``."""
    pyproject = path / "pyproject.toml"
    if not pyproject.is_file():
        raise PackInvalid(str(path), "no pyproject.toml")
    try:
        data = tomllib.loads(pyproject.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise PackInvalid(str(path), f"pyproject.toml does not parse: {exc}") from exc
    eps = data.get("project", {}).get("entry-points", {}).get("inline.packs", {})
    if len(eps) != 1:
        raise PackInvalid(
            str(path),
            "pyproject.toml must declare exactly one entry point in group 'inline.packs' "
            f"(found {sorted(eps) or 'none'})",
        )
    return PackSource(name=next(iter(eps)), path=path.resolve(), first_party=first_party)


def sdk_project_dir() -> Path:
    """The host's own inline-sdk project folder (installed into every pack venv)."""
    here = Path(inline_sdk.__file__).resolve().parent
    for parent in here.parents:
        pyproject = parent / "pyproject.toml"
        if pyproject.is_file() and 'name = "inline-sdk"' in pyproject.read_text():
            return parent
    raise PackInvalid(str(here), "cannot find the inline-sdk project this host runs from")


def _hash_tree(h: hashlib._Hash, root: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(
            d for d in dirnames if d not in SKIP_DIRS and not d.endswith(".egg-info")
        )
        for name in sorted(filenames):
            if name.endswith((".pyc", ".pyo")):
                continue
            path = Path(dirpath) / name
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())


def constraints_file() -> Path | None:
    """The platform constraints file every pack venv is resolved against, if any."""
    raw = os.environ.get("INLINE_CONSTRAINTS") or os.environ.get("UV_CONSTRAINT")
    return Path(raw) if raw else None


def find_links() -> str | None:
    """Where extra wheels lie (uv does not read pip's settings, so pip's are mapped)."""
    return os.environ.get("UV_FIND_LINKS") or os.environ.get("PIP_FIND_LINKS")


def fingerprint(source: PackSource, sdk_dir: Path) -> str:
    """A hash of everything that decides a pack venv's content."""
    h = hashlib.sha256()
    h.update(f"{sys.version}|{sys.executable}".encode())
    _hash_tree(h, source.path)
    _hash_tree(h, sdk_dir / "src")
    h.update((sdk_dir / "pyproject.toml").read_bytes())
    cons = constraints_file()
    if cons is not None and cons.is_file():
        h.update(cons.read_bytes())
    h.update((find_links() or "").encode())
    return h.hexdigest()[:16]


def uv_binary() -> str:
    """The uv executable (the ``uv`` package's own binary, else the one on PATH)."""
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if found is None:
            raise EnvBuildFailed("*", "find uv", "uv is not installed: pip install uv") from None
        return found


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def ensure_env(
    source: PackSource, packs_dir: Path, *, say: Callable[[str], None] | None = None
) -> PackEnv:
    """The pack's venv for its current content, built (once, atomically) if missing."""
    sdk_dir = sdk_project_dir()
    fp = fingerprint(source, sdk_dir)
    env = PackEnv(source=source, fingerprint=fp, root=packs_dir / source.name / fp)
    if (env.root / READY).exists():
        return env
    with _locked(packs_dir / source.name / ".lock"):
        if (env.root / READY).exists():
            return env
        if say is not None:
            say(f"Preparing the venv of pack '{source.name}' (first use)...")
        tmp = env.root.with_name(f".{fp}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            _build(source, tmp, sdk_dir)
            (tmp / READY).write_text(fp)
            shutil.rmtree(env.root, ignore_errors=True)
            os.replace(tmp, env.root)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return env


def _build(source: PackSource, root: Path, sdk_dir: Path) -> None:
    uv = uv_binary()
    venv = root / "venv"
    env = {
        k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT")
    }
    links = find_links()
    if links:
        env["UV_FIND_LINKS"] = links
    _uv(
        source.name,
        "create the venv",
        [uv, "venv", "--quiet", "--python", sys.executable, str(venv)],
        env,
    )
    overrides = root / "overrides.txt"
    overrides.write_text(f"inline-sdk @ {sdk_dir.as_uri()}\n")
    cmd = [
        uv, "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"),
        "--override", str(overrides), str(source.path),
    ]  # fmt: skip
    cons = constraints_file()
    if cons is not None:
        cmd[3:3] = ["--constraint", str(cons)]
    _uv(source.name, "install the pack", cmd, env)


def _uv(pack: str, step: str, cmd: list[str], env: dict[str, str]) -> None:
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise EnvBuildFailed(pack, step, proc.stdout + proc.stderr)
