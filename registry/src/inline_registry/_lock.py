"""``packs.lock``: every pack's exact resolved dependency set, with hashes; the source of truth.

The lock is one JSON file next to ``packs/`` in the data dir. It says which version of each
installed pack is active and which one a rollback returns to, and for each kept version the
exact distributions (``name==version`` and every accepted sha256) its venv was built from, the
pack's own wheel and its sha256, where it came from (folder, wheel, index, git commit) and the
scan consents given. First-party packs (built from the checkout) are recorded too, keyed by the
fingerprint of their sources. Writing the lock (temp file + rename) is the one atomic step that
switches a pack's active version: until then, nothing any reader sees has changed.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import msgspec

from ._errors import LockInvalid

LOCK_VERSION = 1


class LockedDist(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One resolved distribution: ``name==version`` and its accepted hashes."""

    name: str
    version: str
    hashes: tuple[str, ...] = ()

    def line(self) -> str:
        """As a requirements line for ``uv pip sync --require-hashes``."""
        return " ".join([f"{self.name}=={self.version}", *(f"--hash={h}" for h in self.hashes)])


class SourceRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Where an installed version came from, exactly (enough to fetch it again)."""

    kind: str  # folder | wheel | index | git
    location: str  # the folder, the wheel file, ``name==version``, the git URL
    ref: str | None = None  # the ref asked for (git: tag, branch, commit, ``latest``)
    commit: str | None = None  # git: the commit the tree was exported from


class LockedVersion(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """One installed version of a pack and everything its venv is built from."""

    version: str
    dir: str
    source: SourceRecord
    source_sha256: str
    wheel: str
    wheel_sha256: str
    sdk_requirement: str
    sdk_version: str
    python: str
    dependencies: tuple[LockedDist, ...]
    local: tuple[str, ...] = ()  # unhashed local requirements, only with --allow-local-sources
    env_hash: str
    consents: tuple[str, ...] = ()
    allow_local_sources: bool = False
    installed_at: str = ""


class LockedPack(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """An installed pack: its active version and the one a rollback returns to."""

    active: str
    previous: str | None = None
    versions: dict[str, LockedVersion] = msgspec.field(default_factory=dict)

    @property
    def current(self) -> LockedVersion:
        """The active version's record."""
        return self.versions[self.active]


class LockedBuiltin(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A first-party (or path) pack's venv, keyed by the fingerprint of its sources."""

    fingerprint: str
    path: str
    python: str
    dependencies: tuple[LockedDist, ...]
    local: tuple[str, ...] = ()


class PacksLock(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The whole lock file."""

    lock_version: int = LOCK_VERSION
    packs: dict[str, LockedPack] = msgspec.field(default_factory=dict)
    builtin: dict[str, LockedBuiltin] = msgspec.field(default_factory=dict)
    #: The operator's node switches (``inline pack enable|disable NODE``), over the manifests'.
    nodes: dict[str, bool] = msgspec.field(default_factory=dict)


def lock_path(packs_dir: Path) -> Path:
    """``packs.lock`` of the data dir whose ``packs/`` folder is ``packs_dir``."""
    return packs_dir.parent / "packs.lock"


def read_lock(path: Path) -> PacksLock:
    """The lock at ``path`` (an empty one if there is none); ``LockInvalid`` if unreadable."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return PacksLock()
    try:
        lock = msgspec.json.decode(data, type=PacksLock)
    except msgspec.DecodeError as exc:
        raise LockInvalid(str(path), str(exc)) from None
    if lock.lock_version != LOCK_VERSION:
        raise LockInvalid(str(path), f"lock_version {lock.lock_version} (this host reads 1)")
    return lock


def write_lock(path: Path, lock: PacksLock) -> None:
    """Write the lock atomically (temp file, fsync, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = msgspec.json.format(msgspec.json.encode(lock), indent=2) + b"\n"
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def parse_compiled(text: str) -> tuple[list[LockedDist], list[str]]:
    """``uv pip compile --generate-hashes`` output: hashed pins, and unhashed local lines."""
    dists: list[LockedDist] = []
    local: list[str] = []
    for line in _logical_lines(text):
        parts = line.split()
        hashes = tuple(p.removeprefix("--hash=") for p in parts if p.startswith("--hash="))
        spec = " ".join(p for p in parts if not p.startswith("--hash="))
        if "==" in spec and " @ " not in spec and not spec.startswith("-"):
            name, _, version = spec.partition("==")
            dists.append(LockedDist(_normalize(name), version.split(";")[0].strip(), hashes))
        else:
            local.append(spec)
    return dists, local


def _logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    current = ""
    for raw in text.splitlines():
        stripped = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not stripped:
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1].strip() + " "
            continue
        current += stripped.strip()
        lines.append(current)
        current = ""
    if current.strip():
        lines.append(current.strip())
    return lines


def _normalize(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(".", "-")


def locked_requirements(dists: tuple[LockedDist, ...] | list[LockedDist]) -> str:
    """The text ``uv pip sync --require-hashes`` installs exactly."""
    return "".join(d.line() + "\n" for d in dists)


def env_hash(
    *,
    dependencies: tuple[LockedDist, ...] | list[LockedDist],
    local: tuple[str, ...] | list[str],
    wheel_sha256: str,
    sdk_hash: str,
) -> str:
    """The hash of a locked environment: what its descriptor cache is keyed by."""
    h = hashlib.sha256()
    h.update(f"python {python_version()}\n".encode())
    h.update(locked_requirements(list(dependencies)).encode())
    h.update("\n".join(local).encode())
    h.update(f"\nwheel {wheel_sha256}\nsdk {sdk_hash}\n".encode())
    return h.hexdigest()[:16]


def python_version() -> str:
    """The interpreter version pack venvs are built for (``3.11.7``)."""
    return ".".join(str(p) for p in sys.version_info[:3])
