"""Pack venvs on another machine: the recipe ``packs.lock`` gives, rebuilt exactly elsewhere.

A host that runs its workers on cluster nodes sends each node an ``EnvRecipe``: the pack's locked
distributions (with their hashes), its local requirements and, for an installed pack, its kept
wheel (bytes and sha256). The node builds the venv from it with the same steps as here
(``build_venv``: uv, ``--require-hashes``, the node's own copy of inline-sdk) under the same
key, atomically, or reuses the one already there. Nothing is resolved on the node.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import msgspec

from ._envs import READY, build_venv, file_lock, sdk_project_dir
from ._errors import EnvBuildFailed, LockInvalid
from ._lock import LockedDist, lock_path, read_lock


class ShippedWheel(msgspec.Struct, frozen=True):
    """An installed pack's own wheel, as the lock recorded it."""

    name: str
    sha256: str
    data: bytes


class EnvRecipe(msgspec.Struct, frozen=True, kw_only=True):
    """Everything a node needs to rebuild one pack venv exactly as ``packs.lock`` pins it."""

    pack: str
    #: The venv's key under ``<packs dir>/<pack>/``: a fingerprint, or an installed version dir.
    key: str
    #: What the venv's ready marker holds when it is complete (fingerprint or env hash).
    marker: str
    dependencies: tuple[LockedDist, ...]
    local: tuple[str, ...] = ()
    wheel: ShippedWheel | None = None


def recipe_for(python: Path) -> EnvRecipe:
    """The recipe of the venv whose interpreter is ``python`` (``<packs>/<pack>/<key>/venv``),
    read from the lock next to that packs dir; ``LockInvalid`` if the lock does not know it."""
    root = python.parent.parent.parent
    pack, key, packs_dir = root.parent.name, root.name, root.parent.parent
    path = lock_path(packs_dir)
    lock = read_lock(path)
    builtin = lock.builtin.get(pack)
    if builtin is not None and builtin.fingerprint == key:
        return EnvRecipe(
            pack=pack, key=key, marker=key, dependencies=builtin.dependencies, local=builtin.local
        )
    installed = lock.packs.get(pack)
    version = installed.versions.get(key) if installed is not None else None
    if version is not None:
        wheel = root / "dist" / version.wheel
        data = wheel.read_bytes()
        return EnvRecipe(
            pack=pack,
            key=key,
            marker=version.env_hash,
            dependencies=version.dependencies,
            local=version.local,
            wheel=ShippedWheel(version.wheel, version.wheel_sha256, data),
        )
    raise LockInvalid(str(path), f"no entry for pack '{pack}' with venv {key}")


def materialize(recipe: EnvRecipe, packs_dir: Path, *, node: str = "this node") -> tuple[Path, str]:
    """The recipe's venv under ``packs_dir`` on this machine: its python and ``"reused"`` or
    ``"built"``. Built once (a file lock), in a temporary folder renamed into place."""
    root = packs_dir / recipe.pack / recipe.key
    python = root / "venv" / "bin" / "python"
    if _ready(root, recipe.marker, python):
        return python, "reused"
    with file_lock(packs_dir / recipe.pack / ".lock"):
        if _ready(root, recipe.marker, python):
            return python, "reused"
        missing = [p for p in recipe.local if p.startswith("/") and not Path(p).exists()]
        if missing:
            raise EnvBuildFailed(
                recipe.pack,
                "local requirements",
                f"{node} has no {', '.join(missing)} (the pack is installed from a folder: "
                "the same checkout must be at the same path on every node)",
            )
        tmp = root.with_name(f".{recipe.key}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            targets = [*recipe.local, str(sdk_project_dir())]
            if recipe.wheel is not None:
                if hashlib.sha256(recipe.wheel.data).hexdigest() != recipe.wheel.sha256:
                    raise EnvBuildFailed(
                        recipe.pack, "wheel", f"{recipe.wheel.name} does not match its sha256"
                    )
                dist = tmp / "dist"
                dist.mkdir()
                (dist / recipe.wheel.name).write_bytes(recipe.wheel.data)
                targets.append(str(dist / recipe.wheel.name))
            build_venv(recipe.pack, tmp / "venv", recipe.dependencies, targets)
            (tmp / READY).write_text(recipe.marker)
            shutil.rmtree(root, ignore_errors=True)
            os.replace(tmp, root)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return python, "built"


def _ready(root: Path, marker: str, python: Path) -> bool:
    try:
        return (root / READY).read_text().strip() == marker and python.exists()
    except OSError:
        return False
