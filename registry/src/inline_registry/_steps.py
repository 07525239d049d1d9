"""The pieces of an install that need no manager state: its progress events and result, the
scan verdict, the check of resolved pins, the files a version folder holds, and the helpers
that read sources and wheels."""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import msgspec
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from ._describe import describe_unbuilt
from ._envs import READY, PackEnv, fingerprint, sdk_project_dir
from ._errors import PackInvalid, RequirementsRefused, ScanRefused, SourceUnavailable
from ._handshake import read_cached_welcome
from ._lock import LockedVersion
from ._manifest import Manifest
from ._registry import pack_sources
from ._rules import RESERVED_NAMES
from ._scan import CONSENT, CRITICAL, ScanReport, scan_tree
from ._sources import SEMVER_TAG

INSTALL_PHASES: Final = (
    "fetch", "validate", "scan", "build", "resolve", "install", "handshake", "activate",
)  # fmt: skip
KEEP_VERSIONS: Final = 2  # the active one and the one a rollback returns to


@dataclass(frozen=True, slots=True)
class Step:
    """A progress event: the phase (``fetch``, ``scan``...), its place, and what happens."""

    phase: str
    message: str
    index: int = 0
    total: int = 0


ProgressFn = Callable[[Step], None]


@dataclass(frozen=True, slots=True)
class InstallResult:
    """What an install, upgrade or rollback did."""

    name: str
    version: str
    dir: str
    node_types: tuple[str, ...]
    scan: ScanReport | None
    previous: str | None = None
    changed: bool = True
    sdk_version: str = ""


def scan_source(label: str, tree: Path, allow: set[str]) -> ScanReport:
    """The static scan of ``tree`` (nothing is run), refused when it finds a critical rule or
    a risk not consented to; the report records the consents given."""
    report = scan_tree(tree)
    broken = [f for f in report.findings if f.rule == "unparseable-source" and f.line]
    if broken and "unparseable-source" not in allow:
        # a syntax error is the author's to fix, not a risk to consent to
        where = "; ".join(f"fix {f.path}:{f.line}: {f.detail}" for f in broken)
        raise PackInvalid(label, f"its source does not parse ({where})")
    blocked = report.rules(CRITICAL)
    missing = report.missing_consents(allow)
    if blocked or missing:
        raise ScanRefused(label, report, blocked, missing)
    return msgspec.structs.replace(
        report, consents=tuple(sorted(allow & set(report.rules(CONSENT))))
    )


def check_resolved(name: str, deps: list[Any], pins: dict[str, Any]) -> None:
    """Refuse a resolution that moves a distribution the platform pins."""
    for dist in deps:
        pin = pins.get(dist.name)
        if pin is not None and not pin.contains(dist.version, prereleases=True):
            raise RequirementsRefused(
                name, [f"it resolves {dist.name}=={dist.version}; the platform pins {pin}"]
            )


def write_version_files(
    staging: Path, record: LockedVersion, report: ScanReport, manifest: Manifest
) -> None:
    """The receipt, scan and manifest of a staged version, then its ready mark (last)."""
    for item, data in (
        ("receipt.json", msgspec.json.format(msgspec.json.encode(record), indent=2)),
        ("scan.json", msgspec.json.format(msgspec.json.encode(report), indent=2)),
        ("manifest.json", msgspec.json.encode(manifest)),
    ):
        (staging / item).write_bytes(data)
    (staging / READY).write_text(record.env_hash)


def follow_of(ref: str | None) -> str | None:
    """What an upgrade follows: a semver tag -> the newest tag; a branch -> its new head."""
    if ref is None or SEMVER_TAG.match(ref):
        return "latest"
    return ref


def sibling_wheel(wheel: Path, to: str | None) -> Path:
    dist = parse_wheel_filename(wheel.name)[0]
    found: list[tuple[Version, Path]] = []
    for candidate in wheel.parent.glob("*.whl"):
        try:
            name, version, _, _ = parse_wheel_filename(candidate.name)
        except ValueError:
            continue
        if name == dist and (to is None or version == Version(to)):
            found.append((version, candidate))
    if not found:
        want = f"version {to} of {dist}" if to else f"a wheel of {dist}"
        raise SourceUnavailable(str(wheel.parent), f"no {want} next to {wheel.name}")
    return max(found)[1]


def project_pack_name(tree: Path) -> str | None:
    try:
        data = tomllib.loads((tree / "pyproject.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return None
    eps = data.get("project", {}).get("entry-points", {}).get("inline.packs", {})
    return next(iter(eps)) if len(eps) == 1 else None


def names_dist(line: str, dist: str) -> bool:
    head = line.split("@", 1)[0].split("==", 1)[0].strip()
    return bool(head) and canonicalize_name(head) == dist


def source_types(extra: Any, packs_dir: Path, *, first_party_only: bool = False) -> dict[str, str]:
    """Node type -> pack, for first-party and linked packs (built or described)."""
    owners: dict[str, str] = {}
    sdk_dir = sdk_project_dir()
    for source in pack_sources(extra):
        if first_party_only and not source.first_party:
            continue
        fp = fingerprint(source, sdk_dir)
        env = PackEnv(source, fp, packs_dir / source.name / fp)
        welcome = read_cached_welcome(env) or describe_unbuilt(env)
        for d in welcome.descriptors if welcome else ():
            owners.setdefault(d.type, source.name)
    return owners


def reserved_names(extra: Any, packs_dir: Path) -> set[str]:
    """Pack names an installed pack may not take: the reserved ones, the first-party packs and
    the namespaces of their node types."""
    names = set(RESERVED_NAMES)
    for source in pack_sources(extra):
        if source.first_party:
            names.add(source.name)
    for t in source_types(extra, packs_dir, first_party_only=True):
        names.add(t.split("/", 1)[0])
    return names
