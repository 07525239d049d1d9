"""The merged node registry: every pack's descriptors in one catalog, versioned by content."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
from inline_core import NodeEntry
from inline_sdk import Descriptor
from inline_sdk.protocol import Welcome

from ._describe import describe_unbuilt
from ._envs import PackEnv, PackSource, ensure_env, env_for, read_pack_source
from ._errors import NodeConflict, RegistryError
from ._handshake import probe
from ._lock import PacksLock, lock_path, read_lock
from ._manifest import Manifest, NodeManifest, parse_manifest, read_manifest


@dataclass(frozen=True, slots=True)
class PackInfo:
    """A registered pack: its env and what its handshake said."""

    env: PackEnv
    version: str
    sdk_version: str
    node_types: tuple[str, ...]
    manifest: Manifest = field(default_factory=Manifest)

    @property
    def name(self) -> str:
        """The pack's name (its entry point name)."""
        return self.env.source.name


@dataclass(frozen=True)
class MergedRegistry:
    """All packs' nodes as one catalog; ``version`` changes whenever any descriptor does."""

    packs: dict[str, PackInfo]
    entries: dict[str, NodeEntry]
    version: str
    order: tuple[str, ...] = field(default=())
    #: Packs that could not be registered, with the reason (they serve no nodes).
    failed: dict[str, str] = field(default_factory=dict)
    #: Node types a registered pack provides but that are switched off (not served).
    disabled: tuple[str, ...] = field(default=())

    def lookup(self, node_type: str) -> NodeEntry | None:
        """The entry for ``node_type`` (the core's ``NodeCatalog`` protocol)."""
        return self.entries.get(node_type)

    def node_types(self) -> tuple[str, ...]:
        """Every served node type id (the core's ``ListingCatalog`` protocol: suggestions)."""
        return tuple(self.entries)

    def node_manifest(self, node_type: str) -> NodeManifest | None:
        """What the owning pack's manifest says of ``node_type`` (model files, enabled)."""
        entry = self.entries.get(node_type)
        info = self.packs.get(entry.pack) if entry is not None else None
        return info.manifest.nodes.get(node_type) if info is not None else None

    def descriptors(self) -> list[Descriptor]:
        """Every descriptor, in registration order."""
        return [self.entries[t].descriptor for t in self.order]


def builtin_packs_dir() -> Path:
    """The first-party packs shipped with this checkout (``packs/`` at the repository root)."""
    override = os.environ.get("INLINE_BUILTIN_PACKS")
    if override:
        return Path(override)
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "packs").is_dir() and (parent / "pyproject.toml").is_file():
            return parent / "packs"
    return here.parents[3] / "packs"


def pack_sources(extra: Sequence[Path] = ()) -> list[PackSource]:
    """First-party packs, then ``extra`` pack folders and those in ``INLINE_PACK_PATHS``."""
    sources: list[PackSource] = []
    root = builtin_packs_dir()
    if root.is_dir():
        for child in sorted(root.iterdir()):
            if (child / "pyproject.toml").is_file():
                sources.append(read_pack_source(child, first_party=True))
    paths = list(extra)
    paths += [Path(p) for p in os.environ.get("INLINE_PACK_PATHS", "").split(os.pathsep) if p]
    for path in paths:
        sources.append(read_pack_source(path, first_party=False))
    return sources


def with_source(descriptor: Descriptor, source: PackSource) -> Descriptor:
    """The descriptor as served: ``source`` is ``builtin`` or ``ext:<pack>``."""
    label = "builtin" if source.first_party else f"ext:{source.name}"
    return msgspec.structs.replace(descriptor, source=label)


def merge(
    infos: Iterable[tuple[PackInfo, Welcome]],
    failed: dict[str, str] | None = None,
    switches: Mapping[str, bool] | None = None,
) -> MergedRegistry:
    """Merge packs' descriptors. A pack claiming an id another pack already has is refused
    whole (``NodeConflict`` naming both, kept in ``failed``); the others are served.

    A node type is served when it is enabled: by the operator's switch if there is one, else
    by the pack's manifest (``enabled``, default true). A disabled type still belongs to its pack.
    """
    packs: dict[str, PackInfo] = {}
    entries: dict[str, NodeEntry] = {}
    owners: dict[str, str] = {}
    order: list[str] = []
    disabled: list[str] = []
    failed = dict(failed or {})
    switches = switches or {}
    h = hashlib.sha256()
    for info, welcome in infos:
        served = [with_source(d, info.env.source) for d in welcome.descriptors]
        clash = next((d.type for d in served if d.type in owners), None)
        if clash is not None:
            failed[info.name] = str(NodeConflict(clash, owners[clash], info.name))
            continue
        packs[info.name] = info
        for d in served:
            owners[d.type] = info.name
            node = info.manifest.nodes.get(d.type)
            if not switches.get(d.type, node.enabled if node is not None else True):
                disabled.append(d.type)
                h.update(f"off:{d.type}".encode())
                continue
            entries[d.type] = NodeEntry(d, info.name, welcome.pack_version)
            order.append(d.type)
            h.update(msgspec.json.encode(d))
            h.update(f"{info.name}@{welcome.pack_version}".encode())
    return MergedRegistry(
        packs, entries, "r_" + h.hexdigest()[:8], tuple(order), failed, tuple(disabled)
    )


def installed_envs(packs_dir: Path, lock: PacksLock) -> list[tuple[PackEnv, Path]]:
    """The active version of every installed pack: its env and its version folder."""
    found = []
    for name, pack in sorted(lock.packs.items()):
        version = pack.versions.get(pack.active)
        if version is None:
            continue
        root = packs_dir / name / version.dir
        source = PackSource(name=name, path=root / "source", first_party=False)
        found.append((PackEnv(source, version.env_hash, root), root))
    return found


def manifest_of(version_dir: Path) -> Manifest:
    """The manifest kept with an installed version (``manifest.json``; empty without one)."""
    try:
        data = msgspec.json.decode((version_dir / "manifest.json").read_bytes())
    except (OSError, msgspec.DecodeError):
        return Manifest()
    return parse_manifest(data, str(version_dir))


def load_registry(
    packs_dir: Path,
    extra: Sequence[Path] = (),
    *,
    say: Callable[[str], None] | None = None,
    build: bool = False,
) -> MergedRegistry:
    """Every pack's handshake (cached, or taken), merged; venvs are built only where needed.

    First-party packs come first (they own the bare vocabulary), then ``extra`` folders and
    ``INLINE_PACK_PATHS``, then the packs installed in ``packs.lock`` (their active version;
    their venvs are never built here: ``inline pack sync`` does that). A folder pack whose venv
    is built answers from its cached handshake; one whose venv is not built yet is described
    without it (``describe_unbuilt``) and its venv is built on its first call
    (``prepare_env``), so a run builds only the venvs of the packs it uses. Only a pack that
    cannot be described so (it imports a dependency at import time) is built here, and every
    one is with ``build=True`` (``--install``). A pack that fails (build, import, handshake,
    SDK major) is kept in ``failed`` with its reason and serves nothing; the other packs are
    not affected.
    """
    found: list[tuple[PackInfo, Welcome]] = []
    failed: dict[str, str] = {}
    try:
        lock = read_lock(lock_path(packs_dir))
    except RegistryError as exc:
        lock = PacksLock()
        failed["packs.lock"] = str(exc)
    for source in pack_sources(extra):
        try:
            manifest = read_manifest(source.path)
            env = env_for(source, packs_dir)
            welcome = None if env.ready or build else describe_unbuilt(env)
            if welcome is None:
                env = ensure_env(source, packs_dir, say=say)
                welcome = probe(env)
        except RegistryError as exc:
            failed[source.name] = str(exc)
            if say is not None:
                say(f"warning: pack '{source.name}' is unavailable: {exc}")
            continue
        types = tuple(d.type for d in welcome.descriptors)
        info = PackInfo(env, welcome.pack_version, welcome.sdk_version, types, manifest)
        found.append((info, welcome))
    for env, root in installed_envs(packs_dir, lock):
        name = env.source.name
        if any(info.name == name for info, _ in found):
            failed[name] = (
                f"Pack '{name}' is installed, but a pack of that name is registered already"
            )
            continue
        try:
            if not env.ready:
                raise RegistryError(
                    f"Pack '{name}': its venv ({root}) is missing or incomplete: "
                    "run `inline pack sync`"
                )
            manifest = manifest_of(root)
            welcome = probe(env)
        except RegistryError as exc:
            failed[name] = str(exc)
            if say is not None:
                say(f"warning: pack '{name}' is unavailable: {exc}")
            continue
        types = tuple(d.type for d in welcome.descriptors)
        info = PackInfo(env, welcome.pack_version, welcome.sdk_version, types, manifest)
        found.append((info, welcome))
    return merge(found, failed, lock.nodes)
