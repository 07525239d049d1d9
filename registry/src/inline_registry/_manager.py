"""The pack manager: install, upgrade, rollback, remove and sync packs, safely.

An install runs every step in a staging folder next to ``packs/``: fetch, validate (manifest,
requirement lines, the SDK gate, the platform pins), the static scan, build, resolve (hashes),
a fresh venv synced exactly, the handshake, node validation. Only then is the staged version
moved into ``packs/<name>/<version>-<env hash>/`` and ``packs.lock`` rewritten (one atomic
rename): that is the switch. A failure anywhere before it removes the staging folder and
leaves the previous state exactly as it was; the error says why (with the pack's traceback
when its code failed). The previous version stays on disk for ``rollback``.

``PackManager`` is the in-process API (the CLI and the HTTP layer call it); it blocks, so an
async caller runs it in a worker thread.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import shutil
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import msgspec
from packaging.version import Version

from ._envs import (
    PackEnv,
    PackSource,
    build_venv,
    constraints_file,
    file_lock,
    resolve,
    sdk_fingerprint,
    sdk_project_dir,
)
from ._errors import (
    NodeConflict,
    PackInvalid,
    PackNotInstalled,
    RequirementsRefused,
    SourceUnavailable,
)
from ._handshake import probe, read_cached_welcome
from ._lock import (
    LockedPack,
    LockedVersion,
    PacksLock,
    SourceRecord,
    env_hash,
    lock_path,
    python_version,
    read_lock,
    write_lock,
)
from ._manifest import Manifest, read_manifest
from ._registry import pack_sources
from ._rules import (
    check_node_ids,
    check_pack_name,
    check_platform,
    check_requirement_lines,
    extra_requirements,
    line_problem,
    platform_pins,
    sdk_gate,
)
from ._scan import ScanReport, scan_tree
from ._sources import (
    Fetched,
    SourceSpec,
    fetch,
    file_sha256,
    git_mirror,
    parse_source,
    resolve_ref,
)
from ._steps import (
    INSTALL_PHASES,
    InstallResult,
    ProgressFn,
    Step,
    check_resolved,
    follow_of,
    names_dist,
    project_pack_name,
    reserved_names,
    scan_source,
    sibling_wheel,
    source_types,
    write_version_files,
)
from ._upkeep import PackRow, SyncResult, ensure_version, list_packs, prune, sync_packs
from ._uv import build_wheel
from ._wheel import pack_name, read_wheel_meta


class PackManager:
    """Installs, upgrades, rolls back, removes and syncs the packs of one data dir."""

    def __init__(
        self,
        data_dir: Path,
        *,
        extra: Sequence[Path] = (),
        progress: ProgressFn | None = None,
        handshake_timeout: float = 120.0,
    ) -> None:
        self.data_dir = data_dir
        self.packs_dir = data_dir / "packs"
        self.extra = tuple(extra)
        self.progress = progress
        self.handshake_timeout = handshake_timeout

    # paths ------------------------------------------------------------------------------------
    @property
    def lock_file(self) -> Path:
        """``packs.lock``."""
        return lock_path(self.packs_dir)

    @property
    def cache_dir(self) -> Path:
        """Git mirrors (a cache: deleting it loses nothing)."""
        return self.packs_dir / ".cache"

    def version_dir(self, name: str, vdir: str) -> Path:
        """Where an installed version lives."""
        return self.packs_dir / name / vdir

    def read_lock(self) -> PacksLock:
        """The lock as it is on disk now."""
        return read_lock(self.lock_file)

    # progress ---------------------------------------------------------------------------------
    def _step(self, phase: str, message: str = "") -> None:
        if self.progress is not None:
            index = INSTALL_PHASES.index(phase) + 1 if phase in INSTALL_PHASES else 0
            self.progress(Step(phase, message, index, len(INSTALL_PHASES)))

    def step(self, phase: str, message: str = "") -> None:
        """Report a step of an operation (upkeep calls this)."""
        self._step(phase, message)

    def _note(self, phase: str) -> Callable[[str], None]:
        return lambda message: self._step(phase, message)

    @contextlib.contextmanager
    def _operation(self) -> Iterator[None]:
        """One pack operation at a time per data dir (other processes included)."""
        with file_lock(self.packs_dir / ".manager.lock"):
            yield

    # install / upgrade ----------------------------------------------------------------------
    def install(
        self,
        source: str,
        *,
        ref: str | None = None,
        allow: Sequence[str] = (),
        allow_local_sources: bool = False,
    ) -> InstallResult:
        """Install a pack from a folder, a wheel, ``name==version`` or a git URL at ``ref``.

        Installing a pack that is installed already installs that version next to the active
        one and switches to it (like ``upgrade``).
        """
        spec = parse_source(source, ref)
        with self._operation():
            return self._install(spec, set(allow), allow_local_sources, expect=None)

    def upgrade(
        self,
        name: str,
        *,
        to: str | None = None,
        allow: Sequence[str] = (),
        allow_local_sources: bool | None = None,
    ) -> InstallResult:
        """Install the newest (or ``to``) version of an installed pack from where it came from.

        Consents given for the installed version carry over; new findings need new ones.
        """
        with self._operation():
            current = self._installed(name).current
            spec = self._upgrade_spec(current.source, to)
            allowed = set(allow) | set(current.consents)
            local = (
                current.allow_local_sources if allow_local_sources is None else allow_local_sources
            )
            return self._install(spec, allowed, local, expect=name, want_version=to)

    def _upgrade_spec(self, record: SourceRecord, to: str | None) -> SourceSpec:
        if record.kind == "git":
            ref = to if to is not None else follow_of(record.ref)
            if to is not None:
                ref = self._git_tag_for(record.location, to)
            return SourceSpec("git", record.location, ref=ref)
        if record.kind == "index":
            dist = record.location.split("==", 1)[0]
            return SourceSpec("index", dist, version=to)
        if record.kind == "wheel":
            return SourceSpec("wheel", str(sibling_wheel(Path(record.location), to)))
        return SourceSpec("folder", record.location)

    def _git_tag_for(self, url: str, to: str) -> str:
        mirror = git_mirror(url, self.cache_dir, self._note("fetch"))
        for candidate in (to, f"v{to}"):
            try:
                resolve_ref(mirror, url, candidate)
            except SourceUnavailable:
                continue
            return candidate
        raise SourceUnavailable(url, f"no tag, branch or commit named '{to}' or 'v{to}'")

    def _install(
        self,
        spec: SourceSpec,
        allow: set[str],
        allow_local: bool,
        *,
        expect: str | None,
        want_version: str | None = None,
    ) -> InstallResult:
        lock = self.read_lock()
        staging = self.packs_dir / ".staging" / uuid.uuid4().hex[:12]
        staging.mkdir(parents=True)
        try:
            at = f" @ {spec.ref}" if spec.ref else ""
            self._step("fetch", f"{spec.kind} {spec.location}{at}")
            fetched = fetch(spec, staging, self.cache_dir, self._note("fetch"))
            return self._install_staged(
                fetched, staging, lock, allow, allow_local, expect, want_version
            )
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _install_staged(
        self,
        fetched: Fetched,
        staging: Path,
        lock: PacksLock,
        allow: set[str],
        allow_local: bool,
        expect: str | None,
        want_version: str | None,
    ) -> InstallResult:
        tree = fetched.tree
        self._step("validate", "manifest, requirement lines, SDK, platform pins")
        if fetched.wheel is not None:
            label = pack_name(read_wheel_meta(fetched.wheel), str(fetched.wheel))
        else:
            label = project_pack_name(tree) or expect or Path(fetched.record.location).name
        if label != expect:
            check_pack_name(label, reserved_names(self.extra, self.packs_dir))
        manifest = read_manifest(tree) if (tree / "pyproject.toml").is_file() else Manifest()
        extra_lines = extra_requirements(tree)
        check_requirement_lines(label, tree, [], allow_local=allow_local)

        self._step("scan", "reading the source (nothing is run)")
        report = scan_source(label, tree, allow)
        self._step("scan", report.render().splitlines()[0].removeprefix("scan: "))

        if fetched.wheel is None:
            self._step("build", "building the pack's wheel")
            wheel = build_wheel(label, tree, staging / "dist")
        else:
            wheel = fetched.wheel
        meta = read_wheel_meta(wheel)
        name = pack_name(meta, str(wheel))
        if expect is not None and name != expect:
            raise PackInvalid(str(wheel), f"it provides pack '{name}', not '{expect}'")
        if want_version is not None and Version(meta.version) != Version(want_version):
            raise SourceUnavailable(
                fetched.record.location, f"it holds version {meta.version}, not {want_version}"
            )
        check_pack_name(name, reserved_names(self.extra, self.packs_dir))
        self._check_name_free(name)
        requires = list(meta.requires)
        problems = [] if allow_local else [
            f"wheel Requires-Dist '{r}' is {why}" for r in requires if (why := line_problem(r))
        ]  # fmt: skip
        if problems:
            raise RequirementsRefused(name, problems, "Packs resolve from the package index only.")
        sdk_built_for = sdk_gate(name, requires + extra_lines, manifest.sdk)
        pins = platform_pins(constraints_file())
        check_platform(name, requires + extra_lines, pins, constraints_file())

        self._step("resolve", f"{name} {meta.version} against the platform constraints")
        deps, local = resolve(name, [str(wheel), *extra_lines], staging, base=tree)
        local = [
            line for line in local if wheel.name not in line and not names_dist(line, meta.dist)
        ]
        check_resolved(name, deps, pins)
        wheel_sha = file_sha256(wheel)
        env_h = env_hash(
            dependencies=deps, local=local, wheel_sha256=wheel_sha, sdk_hash=sdk_fingerprint()
        )
        vdir = f"{meta.version}-{env_h[:8]}"
        installed = lock.packs.get(name)
        if installed is not None and installed.active == vdir:
            self._step("activate", f"{name} {meta.version} is already installed and active")
            current = installed.current
            welcome = read_cached_welcome(self.env_of(name, current))
            types = tuple(d.type for d in welcome.descriptors) if welcome else ()
            return InstallResult(
                name,
                meta.version,
                vdir,
                types,
                report,
                installed.previous,
                changed=False,
                sdk_version=current.sdk_version,
            )

        record = LockedVersion(
            version=meta.version,
            dir=vdir,
            source=fetched.record,
            source_sha256=fetched.digest,
            wheel=wheel.name,
            wheel_sha256=wheel_sha,
            sdk_requirement=sdk_built_for,
            sdk_version="",
            python=python_version(),
            dependencies=tuple(deps),
            local=tuple(local),
            env_hash=env_h,
            consents=report.consents,
            allow_local_sources=allow_local,
            installed_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        )
        final = self.version_dir(name, vdir)
        reuse = PackEnv(PackSource(name, final / "source", False), env_h, final)
        if reuse.ready and read_cached_welcome(reuse) is not None:
            self._step("install", f"reusing the venv of {vdir}")
            welcome = read_cached_welcome(reuse)
            assert welcome is not None
        else:
            self._step("install", f"{len(deps)} locked distributions, hashes required")
            build_venv(name, staging / "venv", deps, [*local, str(sdk_project_dir()), str(wheel)])
            self._step("handshake", "starting the pack's worker once")
            env = PackEnv(PackSource(name, staging / "source", False), env_h, staging)
            welcome = probe(env, timeout=self.handshake_timeout)
        types = [d.type for d in welcome.descriptors]
        self._validate_nodes(name, types, manifest)
        record = msgspec.structs.replace(record, sdk_version=welcome.sdk_version)

        self._step("activate", f"{name} {meta.version}")
        if not reuse.ready:
            write_version_files(staging, record, report, manifest)
            shutil.rmtree(final, ignore_errors=True)
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging, final)
        previous = installed.active if installed is not None else None
        versions = {vdir: record}
        if previous is not None and installed is not None:
            versions[previous] = installed.versions[previous]
        new_pack = LockedPack(active=vdir, previous=previous, versions=versions)
        self._write(lambda lk: msgspec.structs.replace(lk, packs={**lk.packs, name: new_pack}))
        prune(self.packs_dir, name, set(versions))
        return InstallResult(
            name, meta.version, vdir, tuple(types), report, previous, True, welcome.sdk_version
        )

    def _validate_nodes(self, name: str, types: list[str], manifest: Manifest) -> None:
        check_node_ids(name, types)
        undeclared = [t for t in manifest.nodes if t not in types]
        if undeclared:
            raise PackInvalid(
                name,
                "its manifest declares node types the pack does not provide: "
                + ", ".join(f'tool.inline.nodes."{t}"' for t in undeclared),
            )
        owners = self._known_types(exclude=name)
        for t in types:
            if t in owners:
                raise NodeConflict(t, owners[t], name)

    # rollback / remove --------------------------------------------------------------------
    def rollback(self, name: str) -> InstallResult:
        """Switch back to the version that was active before (it becomes the rollback target)."""
        with self._operation():
            pack = self._installed(name)
            if pack.previous is None or pack.previous not in pack.versions:
                raise PackNotInstalled(name, "has no previous version to roll back to")
            target = pack.versions[pack.previous]
            self._step("verify", f"checking the venv of {target.dir} against packs.lock")
            action = ensure_version(self, name, target)
            welcome = read_cached_welcome(self.env_of(name, target))
            types = tuple(d.type for d in welcome.descriptors) if welcome else ()
            self._step("switch", f"{name} {target.version} (venv {action})")
            swapped = LockedPack(active=pack.previous, previous=pack.active, versions=pack.versions)
            self._write(lambda lk: msgspec.structs.replace(lk, packs={**lk.packs, name: swapped}))
            return InstallResult(
                name,
                target.version,
                target.dir,
                types,
                None,
                previous=pack.active,
                sdk_version=target.sdk_version,
            )

    def remove(self, name: str) -> None:
        """Uninstall a pack: out of the lock first (atomic), then off the disk."""
        with self._operation():
            if name in {s.name for s in self._first_party()}:
                raise PackInvalid(name, "it is a first-party pack: it ships with Inline")
            self._installed(name)
            self._step("remove", f"removing {name} from packs.lock, then from the disk")

            def without(lk: PacksLock) -> PacksLock:
                packs = {k: v for k, v in lk.packs.items() if k != name}
                return msgspec.structs.replace(lk, packs=packs)

            self._write(without)
            shutil.rmtree(self.packs_dir / name, ignore_errors=True)

    # scan -----------------------------------------------------------------------------------
    def scan(self, source: str, *, ref: str | None = None) -> ScanReport:
        """Fetch ``source`` into a scratch folder and scan it (nothing is installed)."""
        spec = parse_source(source, ref)
        staging = self.packs_dir / ".staging" / uuid.uuid4().hex[:12]
        staging.mkdir(parents=True)
        try:
            self._step("fetch", f"{spec.kind} {spec.location}")
            fetched = fetch(spec, staging, self.cache_dir, self._note("fetch"))
            self._step("scan", "reading the source (nothing is run)")
            return scan_tree(fetched.tree)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    # switches --------------------------------------------------------------------------------
    def set_node_enabled(self, node_type: str, enabled: bool) -> None:
        """Switch one node type on or off (the host serves the change on its next reload)."""
        with self._operation():
            if node_type not in self._known_types(exclude=None):
                raise PackInvalid(node_type, "no registered pack provides this node type")

            def switch(lk: PacksLock) -> PacksLock:
                return msgspec.structs.replace(lk, nodes={**lk.nodes, node_type: enabled})

            self._write(switch)

    # sync / list ------------------------------------------------------------------------------
    def sync(self) -> list[SyncResult]:
        """Make every venv exactly what the lock says (rebuild the ones that differ)."""
        with self._operation():
            return sync_packs(self)

    def list(self) -> list[PackRow]:
        """Every pack: first-party, linked (``INLINE_PACK_PATHS``) and installed versions."""
        return list_packs(self)

    # helpers ----------------------------------------------------------------------------------
    def env_of(self, name: str, version: LockedVersion) -> PackEnv:
        """The env of an installed version."""
        root = self.version_dir(name, version.dir)
        return PackEnv(PackSource(name, root / "source", False), version.env_hash, root)

    def _installed(self, name: str) -> LockedPack:
        pack = self.read_lock().packs.get(name)
        if pack is None:
            raise PackNotInstalled(name)
        return pack

    def _write(self, change: Callable[[PacksLock], PacksLock]) -> None:
        with file_lock(self.packs_dir / ".packs.lock.lock"):
            write_lock(self.lock_file, change(read_lock(self.lock_file)))

    def _first_party(self) -> list[PackSource]:
        return [s for s in pack_sources(()) if s.first_party]

    def _check_name_free(self, name: str) -> None:
        for source in pack_sources(self.extra):
            if source.name == name:
                raise PackInvalid(
                    name, f"a pack of that name is already registered from {source.path}"
                )

    def _known_types(self, exclude: str | None) -> dict[str, str]:
        """Node type -> owning pack, from every other pack's cached handshake (no worker)."""
        owners = source_types(self.extra, self.packs_dir)
        for name, pack in self.read_lock().packs.items():
            if name == exclude:
                continue
            welcome = read_cached_welcome(self.env_of(name, pack.current))
            for d in welcome.descriptors if welcome else ():
                owners.setdefault(d.type, name)
        return owners
