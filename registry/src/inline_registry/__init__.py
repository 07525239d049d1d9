"""Inline packs on disk: per-pack uv venvs, their handshakes, and the merged node registry."""

from ._envs import PackEnv, PackSource, ensure_env, read_pack_source, sdk_project_dir
from ._errors import (
    EnvBuildFailed,
    HandshakeFailed,
    NodeConflict,
    PackInvalid,
    RegistryError,
    SdkMismatch,
)
from ._handshake import check_welcome, make_hello, probe, read_cached_welcome
from ._manifest import Manifest, ModelFile, NodeManifest, parse_manifest, read_manifest
from ._registry import (
    MergedRegistry,
    PackInfo,
    builtin_packs_dir,
    load_registry,
    merge,
    pack_sources,
)
from ._spawn import spawn_worker_sync, worker_command, worker_env

__all__ = (
    "EnvBuildFailed",
    "HandshakeFailed",
    "Manifest",
    "MergedRegistry",
    "ModelFile",
    "NodeManifest",
    "NodeConflict",
    "PackEnv",
    "PackInfo",
    "PackInvalid",
    "PackSource",
    "RegistryError",
    "SdkMismatch",
    "builtin_packs_dir",
    "check_welcome",
    "ensure_env",
    "load_registry",
    "make_hello",
    "merge",
    "pack_sources",
    "parse_manifest",
    "probe",
    "read_cached_welcome",
    "read_manifest",
    "read_pack_source",
    "sdk_project_dir",
    "spawn_worker_sync",
    "worker_command",
    "worker_env",
)
