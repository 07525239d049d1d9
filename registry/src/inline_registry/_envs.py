"""Pack venvs: one uv venv per pack and content fingerprint, built atomically, cheap via uv's cache.

A venv is built in two steps, so that it can be rebuilt exactly: its dependencies are resolved
(``uv pip compile --generate-hashes``) against the platform constraints (``INLINE_CONSTRAINTS``
or ``UV_CONSTRAINT``, else the checkout's ``constraints/platform.txt``: torch, numpy's major),
recorded in ``packs.lock``, and installed with ``uv pip sync --require-hashes``; then the pack
itself and the host's own copy of inline-sdk go in without resolving (the SDK is an override,
so a look-alike on a package index can never be picked). ``UV_FIND_LINKS`` / ``PIP_FIND_LINKS``
are honoured, so CPU machines never pull a CUDA torch.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import sys
import tomllib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import inline_sdk
import msgspec

from ._errors import EnvBuildFailed, PackInvalid
from ._lock import (
    LockedBuiltin,
    LockedDist,
    PacksLock,
    lock_path,
    locked_requirements,
    parse_compiled,
    python_version,
    read_lock,
    write_lock,
)
from ._uv import (
    compile_requirements,
    create_venv,
    find_links,
    index_moved,
    install_no_deps,
    sync_locked,
    unavailable_pins,
)

READY: Final = ".ready"
#: Bumped when the way venvs are built changes (2: byte-compiled at install), so venvs built the
#: old way are rebuilt rather than reused.
ENV_LAYOUT: Final = 2
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
        """Where the handshake's answer is cached, keyed by the locked environment's hash."""
        return self.root / f"welcome-{self.fingerprint}.json"

    @property
    def ready(self) -> bool:
        """Whether the venv was completed for exactly this fingerprint (and is still there)."""
        try:
            marker = (self.root / READY).read_text().strip()
        except OSError:
            return False
        return marker == self.fingerprint and self.python.exists()


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


def sdk_fingerprint(sdk_dir: Path | None = None) -> str:
    """A hash of the host's SDK sources (what every venv gets as inline-sdk)."""
    sdk_dir = sdk_dir or sdk_project_dir()
    h = hashlib.sha256()
    _hash_tree(h, sdk_dir / "src")
    h.update((sdk_dir / "pyproject.toml").read_bytes())
    return h.hexdigest()[:16]


def constraints_file() -> Path | None:
    """The platform constraints file every pack venv is resolved against.

    ``INLINE_CONSTRAINTS`` or ``UV_CONSTRAINT``; else the checkout's ``constraints/platform.txt``.
    """
    raw = os.environ.get("INLINE_CONSTRAINTS") or os.environ.get("UV_CONSTRAINT")
    if raw:
        return Path(raw)
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent / "constraints" / "platform.txt"
        if candidate.is_file() and (parent / "pyproject.toml").is_file():
            return candidate
    return None


def local_dependencies(source: PackSource) -> list[Path]:
    """Project folders the pack depends on by path (``[tool.uv.sources] x = {path = ...}``), such
    as a first-party pack whose library code another pack reuses: their content is part of the
    venv's, so it goes into the fingerprint."""
    try:
        data = tomllib.loads((source.path / "pyproject.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return []
    sources = data.get("tool", {}).get("uv", {}).get("sources", {})
    found = []
    for spec in sources.values():
        if isinstance(spec, dict) and isinstance(spec.get("path"), str):
            path = (source.path / spec["path"]).resolve()
            if path.is_dir():
                found.append(path)
    return sorted(found)


def fingerprint(source: PackSource, sdk_dir: Path) -> str:
    """A hash of everything that decides a pack venv's content."""
    h = hashlib.sha256()
    h.update(f"{sys.version}|{sys.executable}".encode())
    _hash_tree(h, source.path)
    for dep in local_dependencies(source):
        h.update(str(dep).encode())
        _hash_tree(h, dep)
    _hash_tree(h, sdk_dir / "src")
    h.update((sdk_dir / "pyproject.toml").read_bytes())
    cons = constraints_file()
    if cons is not None and cons.is_file():
        h.update(cons.read_bytes())
    h.update((find_links() or "").encode())
    h.update(f"layout={ENV_LAYOUT}".encode())
    return h.hexdigest()[:16]


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``path`` (created if missing), held for the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def env_for(source: PackSource, packs_dir: Path) -> PackEnv:
    """The pack's venv for its current content: where it is (or will be) built, not building it."""
    fp = fingerprint(source, sdk_project_dir())
    return PackEnv(source=source, fingerprint=fp, root=packs_dir / source.name / fp)


def prepare_env(env: PackEnv, *, say: Callable[[str], None] | None = None) -> PackEnv:
    """``env`` built if it is not yet (a pack registered lazily, on its first call).

    The venv is built for the pack's content now; when its sources changed since ``env`` was
    planned, that is the newer venv (the one a fresh registry load would plan).
    """
    if env.ready:
        return env
    return ensure_env(env.source, env.root.parent.parent, say=say)


def ensure_env(
    source: PackSource, packs_dir: Path, *, say: Callable[[str], None] | None = None
) -> PackEnv:
    """The pack's venv for its current content, built (once, atomically) if missing.

    The resolved dependency set is recorded in ``packs.lock`` under the pack's fingerprint; a
    venv rebuilt for the same fingerprint (``inline pack sync``) installs exactly that set.
    """
    sdk_dir = sdk_project_dir()
    fp = fingerprint(source, sdk_dir)
    env = PackEnv(source=source, fingerprint=fp, root=packs_dir / source.name / fp)
    if env.ready:
        return env
    with file_lock(packs_dir / source.name / ".lock"):
        if env.ready:
            return env
        if say is not None:
            say(f"Preparing the venv of pack '{source.name}' (first use)...")
        tmp = env.root.with_name(f".{fp}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            locked = read_lock(lock_path(packs_dir)).builtin.get(source.name)
            if locked is not None and locked.fingerprint == fp:
                deps, local = list(locked.dependencies), list(locked.local)
                build_venv(source.name, tmp / "venv", deps, [*local, str(sdk_dir)])
            else:
                deps, local = resolve_and_build(source, tmp, sdk_dir, say=say)
            (tmp / READY).write_text(fp)
            shutil.rmtree(env.root, ignore_errors=True)
            os.replace(tmp, env.root)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        record = LockedBuiltin(
            fingerprint=fp,
            path=str(source.path),
            python=python_version(),
            dependencies=tuple(deps),
            local=tuple(local),
        )
        update_lock(
            packs_dir,
            lambda lock: msgspec.structs.replace(
                lock, builtin={**lock.builtin, source.name: record}
            ),
        )
    return env


def update_lock(packs_dir: Path, change: Callable[[PacksLock], PacksLock]) -> PacksLock:
    """Read, change and write ``packs.lock`` under its file lock; the lock written."""
    path = lock_path(packs_dir)
    with file_lock(packs_dir / ".packs.lock.lock"):
        new = change(read_lock(path))
        write_lock(path, new)
    return new


def resolve_and_build(
    source: PackSource, tmp: Path, sdk_dir: Path, *, say: Callable[[str], None] | None
) -> tuple[list[LockedDist], list[str]]:
    """Resolve the pack and build its venv at ``tmp / "venv"``; the pins it was built from.

    When the index no longer offers a version it resolved to a moment before (a release
    withdrawn between the two steps, or index mirrors that disagree), the venv is resolved
    once more with the index read afresh and without the versions the install could not
    find, and built on that, instead of failing the first use.
    """
    deps, local = resolve(source.name, [str(source.path)], tmp, base=source.path)
    try:
        build_venv(source.name, tmp / "venv", deps, [*local, str(sdk_dir)])
    except EnvBuildFailed as err:
        if not index_moved(err):
            raise
        if say is not None:
            say(f"The package index changed while pack '{source.name}' was being installed: "
                "resolving it again")  # fmt: skip
        shutil.rmtree(tmp / "venv", ignore_errors=True)
        avoid = unavailable_pins(err)
        deps, local = resolve(
            source.name, [str(source.path)], tmp, base=source.path, refresh=True, avoid=avoid
        )
        build_venv(source.name, tmp / "venv", deps, [*local, str(sdk_dir)])
    return deps, local


def resolve(
    pack: str,
    requirements: Sequence[str],
    work: Path,
    *,
    base: Path,
    refresh: bool = False,
    avoid: Sequence[str] = (),
) -> tuple[list[LockedDist], list[str]]:
    """Resolve ``requirements`` against the platform constraints, with the host's SDK.

    Returns the hashed pins and the unhashed local requirements (the pack itself, path
    dependencies: relative paths are made absolute against ``base``); the SDK is left out
    (the host's own is always installed). ``avoid``: constraints of versions not to choose.
    """
    sdk_dir = sdk_project_dir()
    req_in = work / "requirements.in"
    req_in.write_text("".join(f"{r}\n" for r in requirements))
    overrides = work / "overrides.txt"
    overrides.write_text(f"inline-sdk @ {sdk_dir.as_uri()}\n")
    cons = constraints_file()
    constraints = [cons] if cons is not None else []
    if avoid:
        avoided = work / "avoid.txt"
        avoided.write_text("".join(f"{line}\n" for line in avoid))
        constraints.append(avoided)
    text = compile_requirements(
        pack,
        req_in,
        constraints=constraints,
        overrides=overrides,
        cwd=base,
        refresh=refresh,
    )
    (work / "requirements.lock").write_text(text)
    deps, local = parse_compiled(text)
    kept: list[str] = []
    for line in local:
        if line.startswith("inline-sdk @ ") or line.startswith("inline-sdk=="):
            continue
        if line.startswith((".", "/")) and not line.startswith("//"):
            line = str((base / line).resolve())
        kept.append(line)
    return deps, kept


def build_venv(pack: str, venv: Path, deps: Sequence[LockedDist], local: Sequence[str]) -> None:
    """Create ``venv``, sync it to exactly ``deps`` (hashes required), then add ``local``."""
    create_venv(pack, venv)
    locked = venv.parent / "requirements.txt"
    locked.write_text(locked_requirements(list(deps)))
    if deps:
        sync_locked(pack, venv, locked)
    install_no_deps(pack, venv, list(local))
