"""A pack's nodes without its venv: declared by the host's own SDK, in a guarded child process.

A pack's descriptors depend only on its own code and the SDK, so a pack whose venv is not built
yet can still be served (``GET /v1/models``, validation) without building it: a child process
of the host's interpreter imports the pack's module from its source folder, behind an import
guard that admits only the standard library, the SDK (with msgspec and pluggy) and the pack's
own modules (and those of its path dependencies). A pack that imports anything else at import
time (pillow, torch) cannot be described this way; its venv is built then, as before, and its
handshake taken. The answer is cached next to where the venv goes, keyed by the same
fingerprint, so a later load needs no child process at all.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Final

import msgspec
from inline_sdk import SDK_VERSION
from inline_sdk.protocol import PROTOCOL, Welcome

from ._envs import PackEnv, local_dependencies
from ._files import write_atomically
from ._sandbox import (
    SCRATCH,
    SandboxUnavailable,
    apply_env,
    confined_command,
    probe_confinement,
)

__all__ = ("describe_unbuilt", "described_file", "read_described")

_SIMPLE_VERSION: Final = re.compile(r"^\d+(\.\d+)*$")
_ALLOWED: Final = ("inline_sdk", "msgspec", "pluggy")
_TIMEOUT_S: Final = 60.0

# Runs in the child: guard imports, import the pack from its sources, write the descriptors.
_SCRIPT: Final = """
import importlib, importlib.abc, json, sys
args = json.loads(sys.argv[1])
allowed = set(args["allowed"])

class Guard(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        top = name.partition(".")[0]
        if top in sys.stdlib_module_names or top in allowed:
            return None
        raise ModuleNotFoundError(f"{name} is not importable before the venv is built", name=name)

sys.meta_path.insert(0, Guard())
sys.path[:0] = args["paths"]
import msgspec
from inline_sdk._worker import collect_mappings, collect_specs, plugin_manager
module, _, attr = args["entry"].partition(":")
plugin = importlib.import_module(module)
for part in filter(None, attr.split(".")):
    plugin = getattr(plugin, part)
pm = plugin_manager(args["pack"], plugin)
nodes = collect_specs(pm)
with open(args["out"], "wb") as fh:
    fh.write(msgspec.json.encode([[n.descriptor for n in nodes], collect_mappings(pm)]))
"""


def described_file(env: PackEnv) -> Path:
    """Where the descriptors of a pack described without its venv are cached."""
    return env.root.parent / f"described-{env.fingerprint}.json"


def read_described(env: PackEnv) -> Welcome | None:
    """The cached description of a pack not built yet, if any (no child process)."""
    try:
        return msgspec.json.decode(described_file(env).read_bytes(), type=Welcome)
    except (OSError, msgspec.DecodeError):
        return None


def describe_unbuilt(env: PackEnv) -> Welcome | None:
    """The handshake the pack's worker would answer, made without its venv (cached per
    fingerprint); ``None`` when the pack cannot be described so (its venv must be built)."""
    cache = described_file(env)
    cached = read_described(env)
    if cached is not None:
        return cached
    plan = _plan(env)
    if plan is None:
        return None
    version, entry, paths = plan
    allowed = [*_ALLOWED, *(name for p in paths for name in _top_level_names(p))]
    with tempfile.TemporaryDirectory(prefix="inline-describe-") as tmp:
        out = Path(tmp) / "descriptors.json"
        try:  # the pack's code runs: sandboxed, as its worker would be
            confinement = probe_confinement(env.source.name, Path(sys.prefix), Path(tmp),
                                            first_party=env.source.first_party)  # fmt: skip
        except SandboxUnavailable:
            return None  # its venv is built, and its handshake says why it cannot start
        args = {
            "allowed": allowed,
            "paths": [str(p) for p in paths],
            "pack": env.source.name,
            "entry": entry,
            "out": str(SCRATCH / out.name) if confinement is not None else str(out),
        }
        child_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        child_env["PYTHONDONTWRITEBYTECODE"] = "1"  # never write into the pack's source tree
        command = [sys.executable, "-c", _SCRIPT, json.dumps(args)]
        if confinement is not None:
            confinement = dataclasses.replace(confinement, read_only=tuple(paths))
            command, changes = confined_command(command, confinement)
            child_env = apply_env(child_env, changes)
        try:
            proc = subprocess.run(
                command,
                env=child_env,
                cwd=tmp,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        if proc.returncode != 0 or not out.is_file():
            return None
        try:
            descriptors, mappings = msgspec.json.decode(out.read_bytes())
            welcome = msgspec.convert(
                {
                    "protocol": PROTOCOL,
                    "sdk_version": SDK_VERSION,
                    "pack": env.source.name,
                    "pack_version": version,
                    "descriptors": descriptors,
                    "pid": 0,
                    "comfyui_mappings": mappings,
                },
                Welcome,
            )
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None
    cache.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(cache, msgspec.json.encode(welcome))
    return welcome


def _plan(env: PackEnv) -> tuple[str, str, list[Path]] | None:
    """The pack's version, entry point and import folders; ``None`` when they are not static."""
    try:
        project = tomllib.loads((env.source.path / "pyproject.toml").read_text())["project"]
    except (OSError, tomllib.TOMLDecodeError, KeyError):
        return None
    version = project.get("version")
    eps = project.get("entry-points", {}).get("inline.packs", {})
    entry = eps.get(env.source.name)
    # A dynamic or unnormalised version would differ from what the installed dist reports.
    if not isinstance(version, str) or not _SIMPLE_VERSION.match(version):
        return None
    if not isinstance(entry, str):
        return None
    paths = [_import_root(env.source.path)]
    paths += [_import_root(dep) for dep in local_dependencies(env.source)]
    return version, entry, paths


def _import_root(project: Path) -> Path:
    src = project / "src"
    return src if src.is_dir() else project


def _top_level_names(root: Path) -> list[str]:
    names = []
    for child in root.iterdir():
        if child.is_dir() and (child / "__init__.py").is_file():
            names.append(child.name)
        elif child.suffix == ".py":
            names.append(child.stem)
    return names
