"""Keeping installed venvs as the lock says: ``sync``, the check a rollback does, ``list``.

A venv matches the lock when ``uv pip freeze`` shows exactly the locked pins (and no more local
installs than the SDK, the pack itself and allowed local requirements). One that does not, or
is missing, is rebuilt from the lock alone: the locked pins with their hashes, the kept wheel
(its sha256 checked), the host's SDK; then its handshake is taken again.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from inline_sdk.protocol import Welcome
from packaging.utils import canonicalize_name

from ._describe import read_described
from ._envs import READY, PackEnv, build_venv, ensure_env, fingerprint, sdk_project_dir
from ._errors import PackInvalid, PackNotInstalled, RegistryError
from ._handshake import probe, read_cached_welcome
from ._lock import LockedDist, LockedVersion, PacksLock
from ._manifest import Manifest, read_manifest
from ._registry import manifest_of, pack_sources
from ._sources import file_sha256
from ._uv import freeze


class PackPlaces(Protocol):
    """What upkeep needs of its caller (the ``PackManager``): where the packs live, the lock,
    and where to report progress. A protocol, so that upkeep never imports the manager."""

    packs_dir: Path
    extra: tuple[Path, ...]
    handshake_timeout: float

    def read_lock(self) -> PacksLock: ...

    def env_of(self, name: str, version: LockedVersion) -> PackEnv: ...

    def step(self, phase: str, message: str = "") -> None: ...


@dataclass(frozen=True, slots=True)
class PackRow:
    """One line of ``inline pack list``."""

    name: str
    version: str
    sdk_version: str
    node_types: tuple[str, ...]
    size_bytes: int
    state: str
    source: str
    dir: str = ""
    disabled: tuple[str, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class SyncResult:
    """What ``sync`` did to one venv."""

    name: str
    version: str
    action: str  # ok | rebuilt


def sync_packs(m: PackPlaces) -> list[SyncResult]:
    """Check every venv against the lock; rebuild the ones that differ; sweep the rest."""
    results: list[SyncResult] = []
    lock = m.read_lock()
    sdk_dir = sdk_project_dir()
    for source in pack_sources(m.extra):
        kind = "first-party" if source.first_party else "linked"
        m.step("sync", f"{source.name} ({kind})")
        fp = fingerprint(source, sdk_dir)
        env = PackEnv(source, fp, m.packs_dir / source.name / fp)
        locked = lock.builtin.get(source.name)
        ok = env.ready
        if ok and locked is not None and locked.fingerprint == fp:
            ok = venv_matches(env, locked.dependencies, len(locked.local) + 1)
        if not ok:
            shutil.rmtree(env.root, ignore_errors=True)  # rebuilt from the lock just below
        welcome = probe(ensure_env(source, m.packs_dir), timeout=m.handshake_timeout)
        results.append(SyncResult(source.name, welcome.pack_version, "ok" if ok else "rebuilt"))
    for name, pack in sorted(lock.packs.items()):
        for vdir in (pack.active, pack.previous):
            if vdir is None or vdir not in pack.versions:
                continue
            version = pack.versions[vdir]
            m.step("sync", f"{name} {version.version}")
            results.append(SyncResult(name, version.version, ensure_version(m, name, version)))
    sweep(m.packs_dir, lock)
    return results


def ensure_version(m: PackPlaces, name: str, version: LockedVersion) -> str:
    """Check an installed version's venv against the lock; rebuild it exactly if it differs."""
    env = m.env_of(name, version)
    if env.ready and venv_matches(env, version.dependencies, len(version.local) + 2):
        if read_cached_welcome(env) is None:
            probe(env, timeout=m.handshake_timeout)
        return "ok"
    wheel = env.root / "dist" / version.wheel
    if not wheel.is_file() or file_sha256(wheel) != version.wheel_sha256:
        raise PackNotInstalled(
            name,
            f"cannot rebuild version {version.version}: its wheel {wheel} is missing or does "
            "not match the lock's sha256 (reinstall it)",
        )
    tmp = env.root / f".venv.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    (env.root / READY).unlink(missing_ok=True)
    try:
        targets = [*version.local, str(sdk_project_dir()), str(wheel)]
        build_venv(name, tmp, version.dependencies, targets)
        shutil.rmtree(env.root / "venv", ignore_errors=True)
        os.replace(tmp, env.root / "venv")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    env.descriptors_file.unlink(missing_ok=True)
    probe(env, timeout=m.handshake_timeout)
    (env.root / READY).write_text(version.env_hash)
    return "rebuilt"


def venv_matches(env: PackEnv, dependencies: Sequence[LockedDist], from_files: int) -> bool:
    """Whether a venv holds exactly the locked pins (plus at most ``from_files`` local installs:
    the SDK, the pack itself, allowed local requirements)."""
    if not env.python.exists():
        return False
    try:
        lines = freeze(env.root / "venv")
    except RegistryError:
        return False
    pinned = {f"{d.name}=={d.version}" for d in dependencies}
    found: set[str] = set()
    local = 0
    for line in lines:
        head, sep, ver = line.partition("==")
        if sep and canonicalize_name(head) != "inline-sdk":
            found.add(f"{canonicalize_name(head)}=={ver}")
        elif not sep:
            local += 1
    return pinned == found and local <= from_files


def sweep(packs_dir: Path, lock: PacksLock) -> None:
    """Remove what no lock entry names: interrupted stagings, pruned or removed versions."""
    shutil.rmtree(packs_dir / ".staging", ignore_errors=True)
    for name, pack in lock.packs.items():
        prune(packs_dir, name, {v for v in (pack.active, pack.previous) if v})


def prune(packs_dir: Path, name: str, keep: set[str]) -> None:
    """Delete the version folders of ``name`` not in ``keep``."""
    root = packs_dir / name
    if not root.is_dir():
        return
    for child in root.iterdir():
        if child.is_dir() and child.name not in keep and not child.name.startswith("."):
            shutil.rmtree(child, ignore_errors=True)


def list_packs(m: PackPlaces) -> list[PackRow]:
    """Every pack: first-party, linked (``INLINE_PACK_PATHS``) and installed versions."""
    rows: list[PackRow] = []
    lock = m.read_lock()
    sdk_dir = sdk_project_dir()
    for source in pack_sources(m.extra):
        fp = fingerprint(source, sdk_dir)
        env = PackEnv(source, fp, m.packs_dir / source.name / fp)
        welcome = read_cached_welcome(env) if env.ready else read_described(env)
        kind = "builtin" if source.first_party else "linked"
        try:
            manifest = read_manifest(source.path)
        except PackInvalid:
            manifest = Manifest()
        rows.append(
            PackRow(
                name=source.name,
                version=welcome.pack_version if welcome else "?",
                sdk_version=welcome.sdk_version if welcome else "?",
                node_types=tuple(d.type for d in welcome.descriptors) if welcome else (),
                size_bytes=disk_usage(env.root / "venv") if env.ready else 0,
                state=kind if env.ready else f"{kind} (venv built on first use)",
                source=str(source.path),
                dir=str(env.root) if env.ready else "",
                disabled=disabled_types(welcome, manifest, lock.nodes),
            )
        )
    for name, pack in sorted(lock.packs.items()):
        for vdir in (pack.active, pack.previous):
            if vdir is None or vdir not in pack.versions:
                continue
            version = pack.versions[vdir]
            env = m.env_of(name, version)
            welcome = read_cached_welcome(env) if env.ready else None
            state = "active" if vdir == pack.active else "previous (rollback target)"
            if not env.ready:
                state += ", venv missing: run `inline pack sync`"
            where = version.source.location
            if version.source.commit:
                where += f" @ {version.source.ref} ({version.source.commit[:12]})"
            rows.append(
                PackRow(
                    name=name,
                    version=version.version,
                    sdk_version=version.sdk_version,
                    node_types=tuple(d.type for d in welcome.descriptors) if welcome else (),
                    size_bytes=disk_usage(env.root / "venv") if env.ready else 0,
                    state=state,
                    source=f"{version.source.kind}: {where}",
                    dir=str(env.root),
                    disabled=disabled_types(welcome, manifest_of(env.root), lock.nodes),
                )
            )
    return rows


def disabled_types(
    welcome: Welcome | None, manifest: Manifest, switches: dict[str, bool]
) -> tuple[str, ...]:
    """The node types of a pack that are switched off (operator's switch, else its manifest)."""
    off = []
    for d in welcome.descriptors if welcome else ():
        node = manifest.nodes.get(d.type)
        if not switches.get(d.type, node.enabled if node is not None else True):
            off.append(d.type)
    return tuple(off)


def disk_usage(path: Path) -> int:
    """Bytes on disk under ``path``, each file (inode) counted once."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            key = (st.st_dev, st.st_ino)
            if key not in seen:
                seen.add(key)
                total += st.st_blocks * 512
    return total
