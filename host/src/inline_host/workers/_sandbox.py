"""Which workers run sandboxed, and in what (``INLINE_SANDBOX``: ``auto``, ``off``,
``required``); the sandbox itself is ``inline_registry``'s (bubblewrap).

- ``auto`` (the default): every worker is sandboxed wherever bubblewrap works. Where it does
  not, a first-party pack runs unsandboxed (said once, in one warning line) and a third-party
  pack is refused in one line that says how to allow it.
- ``off`` (``inline serve --no-sandbox``): no worker is sandboxed (health says so).
- ``required``: a worker that cannot be sandboxed is refused, first-party or not.

A worker reads the models dirs (only the categories its manifest names in ``model_categories``,
where it names them), the input roots and the uploaded assets its calls name, read-only; it
writes only its scratch (``<data dir>/scratch/<pack>``, seen as ``/inline/scratch``). The host's
data dir (run store, blobs and takes, secrets, tokens, other packs) is never in its view, nor
the user's home: the home (a default input root) is left out, and a root holding the data dir
has the data dir masked.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, Final

from inline_registry import Confinement, MergedRegistry, sandbox_problem
from inline_sdk.protocol import asset_file

from .._settings import Settings
from ._launcher import LaunchFailed

MODES: Final = ("auto", "off", "required")
log = logging.getLogger("inline.workers")


class Sandboxing:
    """The sandbox decision for each worker of this host."""

    def __init__(
        self,
        settings: Settings,
        registry: Callable[[], MergedRegistry] | None,
        known: Mapping[str, tuple[bool, bool]] | None = None,
    ) -> None:
        self.settings = settings
        self.mode = settings.sandbox
        self._registry = registry
        #: (first-party, network) of packs no registry here knows (a Serve replica's)
        self._known = dict(known or {})
        self._warned = False

    def problem(self) -> str | None:
        """Why workers cannot be sandboxed here (None: they can, or the sandbox is off)."""
        return None if self.mode == "off" else sandbox_problem()

    def describe(self) -> dict[str, Any]:
        """For health: the mode, whether workers are sandboxed, why not."""
        problem = self.problem()
        return {"mode": self.mode, "active": self.mode != "off" and problem is None,
                "problem": problem}  # fmt: skip

    def trust(self, pack: str) -> tuple[bool, bool]:
        """(first-party, network) of ``pack`` from its registration (unknown: neither)."""
        info = self._registry().packs.get(pack) if self._registry is not None else None
        if info is None:
            return self._known.get(pack, (False, False))
        return info.env.source.first_party, bool(getattr(info.manifest, "network", False))

    def confinement(self, pack: str, python: Path, *, network: bool = False) -> Confinement | None:
        """The sandbox of a worker of ``pack`` (its venv's ``python``); None to run it as is;
        ``LaunchFailed`` when it must be sandboxed and cannot be."""
        if self.mode == "off":
            return None
        first_party, declared = self.trust(pack)
        problem = sandbox_problem()
        if problem is not None:
            if self.mode == "required":
                raise LaunchFailed(f"INLINE_SANDBOX=required and workers cannot be sandboxed "
                                   f"here: {problem}")  # fmt: skip
            if not first_party:
                raise LaunchFailed(
                    f"pack {pack} is not a first-party pack and cannot be sandboxed here "
                    f"({problem}); to run it unsandboxed anyway: INLINE_SANDBOX=off (or inline "
                    "serve --no-sandbox)"
                )
            if not self._warned:
                self._warned = True
                log.warning("workers run unsandboxed: %s", problem)
            return None
        models = self.models_view(self.categories(pack))
        return Confinement(
            venv=python.parent.parent,
            scratch=self.settings.data_dir / "scratch" / pack,
            read_only=self.readable(models),
            network=declared or network,
            masked=(self.settings.data_dir,),
            reopened=self.reopened(pack, models),
            env=self.env_changes(),
        )

    def categories(self, pack: str) -> tuple[str, ...] | None:
        """The model categories ``pack``'s manifest says its workers read (None: every one)."""
        info = self._registry().packs.get(pack) if self._registry is not None else None
        return getattr(info.manifest, "model_categories", None) if info is not None else None

    def models_view(self, categories: tuple[str, ...] | None) -> tuple[Path, ...]:
        """The models folders a worker reads: each models dir whole, or only its
        ``categories``. Each such folder is made if missing, so that it is bound now and a model
        added to it while the worker runs is seen (a read-only models dir just lacks it)."""
        roots = self.settings.models_roots
        if categories is None:
            return tuple(roots)
        out: list[Path] = []
        for root in roots:
            for category in categories:
                folder = root / category
                with contextlib.suppress(OSError):
                    folder.mkdir(parents=True, exist_ok=True)
                if folder.is_dir():
                    out.append(folder)
        return tuple(out)

    def readable(self, models: tuple[Path, ...]) -> tuple[Path, ...]:
        """What a worker may read, besides its venv: its ``models_view``, the input roots
        (without the home, unless ``INLINE_INPUT_ROOTS`` names it) and ``INLINE_SANDBOX_READ``."""
        s = self.settings
        home = Path.home().resolve()
        named = bool(os.environ.get("INLINE_INPUT_ROOTS"))
        roots = [r for r in s.input_roots if named or not _holds(r.resolve(), home)]
        return tuple(dict.fromkeys([*models, *roots, *s.sandbox_read]))

    def reopened(self, pack: str, models: tuple[Path, ...]) -> tuple[Path, ...]:
        """Folders of the (masked) data dir a worker reads: the inputs, its pack's view of the
        assets (those its calls named, never the whole blob store: other runs' takes lie
        there), and the ``models`` folders inside it."""
        s = self.settings
        inputs = s.data_dir / "inputs"
        view = assets_view(s, pack)
        with contextlib.suppress(OSError):
            view.mkdir(parents=True, exist_ok=True)
        return tuple(p for p in (inputs, view) if p.exists()) + tuple(
            r for r in models if _holds(s.data_dir, r)
        )

    def env_changes(self) -> dict[str, str]:
        """Variables a worker loses: any ``INLINE_*`` naming a path in the data dir."""
        data = str(self.settings.data_dir)
        return {k: "" for k, v in os.environ.items() if k.startswith("INLINE_") and data in v}


def node_knobs(settings: Settings, trust: tuple[bool, bool]) -> dict[str, Any]:
    """What a worker started on a cluster node runs and is sandboxed under there: the host's
    paths (every node has them; models at ``INLINE_RAY_MODELS_DIR`` where set), its sandbox
    mode, and the pack's (first-party, network)."""
    nodes_models = settings.ray_models_dir  # the nodes' own folder, else the host's paths
    return {
        "data_dir": settings.data_dir,
        "models_dir": nodes_models or settings.models_dir,
        "extra_models_dirs": () if nodes_models else settings.extra_models_dirs,
        "input_roots": settings.input_roots,
        "sandbox": settings.sandbox,
        "sandbox_read": settings.sandbox_read,
        "trust": list(trust),
    }


def node_settings(knobs: Mapping[str, Any]) -> Settings:
    """The settings a node's worker runs under, from ``node_knobs`` and the other knobs that
    name a setting (the rest, such as a Serve replica's ``warm``, are its caller's)."""
    base = Settings.from_env({"INLINE_DATA_DIR": str(knobs["data_dir"])})
    settable = {f.name for f in fields(Settings)}
    return replace(base, **{k: v for k, v in knobs.items() if k in settable})


def node_sandboxing(knobs: Mapping[str, Any], pack: str) -> Sandboxing:
    """How this node sandboxes a worker of ``pack`` started from the host's ``knobs`` (its
    ``settings`` are the ones the worker runs under)."""
    first_party, declared = knobs.get("trust") or (False, False)
    return Sandboxing(node_settings(knobs), None, {pack: (bool(first_party), bool(declared))})


def assets_view(settings: Settings, pack: str) -> Path:
    """The folder a sandboxed worker of ``pack`` finds uploaded assets in (read-only): the
    host links each asset a call names into it before the call (``share_assets``)."""
    return settings.data_dir / "assets-view" / pack


def asset_ids(params: Any) -> set[str]:
    """The asset ids (``{"ref": "asset", "id": "sha256-..."}``) anywhere in ``params``."""
    found: set[str] = set()
    stack = [params]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            if item.get("ref") == "asset" and isinstance(item.get("id"), str):
                found.add(item["id"])
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return found


def share_assets(settings: Settings, pack: str, ids: set[str]) -> None:
    """Link the blobs of ``ids`` into ``pack``'s assets view (a hard link: no copy, and the
    worker's read-only view cannot change the blob); an unknown id is left for the worker to
    name ("upload it first")."""
    blobs = settings.blobs_dir / "sha256"
    view = assets_view(settings, pack)
    for aid in ids:
        src, dst = asset_file(blobs, aid), asset_file(view, aid)
        if src is None or dst is None or dst.exists() or not src.is_file():
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
        try:
            os.link(src, tmp)
        except OSError:  # another filesystem: a copy
            shutil.copyfile(src, tmp)
        os.replace(tmp, dst)


def _holds(outer: Path, inner: Path) -> bool:
    return inner == outer or inner.is_relative_to(outer)
