"""Inline packs on disk: per-pack uv venvs, the pack manager, the lock, and the merged registry."""

from ._describe import describe_unbuilt
from ._envs import (
    PackEnv,
    PackSource,
    ensure_env,
    env_for,
    prepare_env,
    read_pack_source,
    sdk_project_dir,
)
from ._errors import (
    EnvBuildFailed,
    HandshakeFailed,
    LockInvalid,
    NodeConflict,
    NodeIdRefused,
    PackInvalid,
    PackNotInstalled,
    RegistryError,
    RequirementsRefused,
    ScanRefused,
    SdkMismatch,
    SourceUnavailable,
)
from ._handshake import check_welcome, make_hello, probe, read_cached_welcome
from ._lock import LockedDist, LockedPack, LockedVersion, PacksLock, lock_path, read_lock
from ._manager import InstallResult, PackManager, PackRow, Step, SyncResult
from ._manifest import Manifest, ModelFile, NodeManifest, parse_manifest, read_manifest
from ._registry import (
    MergedRegistry,
    PackInfo,
    builtin_packs_dir,
    load_registry,
    merge,
    pack_sources,
)
from ._remote import EnvRecipe, ShippedWheel, materialize, recipe_for
from ._scaffold import scaffold_pack
from ._scan import RULES, Finding, ScanReport, scan_tree
from ._spawn import spawn_worker_sync, worker_command, worker_env

__all__ = (
    "RULES",
    "EnvBuildFailed",
    "EnvRecipe",
    "Finding",
    "HandshakeFailed",
    "InstallResult",
    "LockInvalid",
    "LockedDist",
    "LockedPack",
    "LockedVersion",
    "Manifest",
    "MergedRegistry",
    "ModelFile",
    "NodeConflict",
    "NodeIdRefused",
    "NodeManifest",
    "PackEnv",
    "PackInfo",
    "PackInvalid",
    "PackManager",
    "PackNotInstalled",
    "PackRow",
    "PackSource",
    "PacksLock",
    "RegistryError",
    "RequirementsRefused",
    "ScanRefused",
    "ScanReport",
    "SdkMismatch",
    "ShippedWheel",
    "SourceUnavailable",
    "Step",
    "SyncResult",
    "builtin_packs_dir",
    "check_welcome",
    "describe_unbuilt",
    "ensure_env",
    "env_for",
    "load_registry",
    "lock_path",
    "make_hello",
    "materialize",
    "merge",
    "pack_sources",
    "prepare_env",
    "parse_manifest",
    "probe",
    "read_cached_welcome",
    "recipe_for",
    "read_lock",
    "read_manifest",
    "read_pack_source",
    "scaffold_pack",
    "scan_tree",
    "sdk_project_dir",
    "spawn_worker_sync",
    "worker_command",
    "worker_env",
)
