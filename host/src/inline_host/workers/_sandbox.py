"""Which workers run sandboxed, and in what (``INLINE_SANDBOX``: ``auto``, ``off``,
``required``); the sandbox itself is ``inline_registry``'s (bubblewrap).

- ``auto`` (the default): every worker is sandboxed wherever bubblewrap works. Where it does
  not, a first-party pack runs unsandboxed (said once, in one warning line) and a third-party
  pack is refused in one line that says how to allow it.
- ``off`` (``inline serve --no-sandbox``): no worker is sandboxed (health says so).
- ``required``: a worker that cannot be sandboxed is refused, first-party or not.

A worker reads the models dirs (only the categories its manifest names in ``model_categories``,
where it names them), the input roots and the asset blobs, read-only; it writes only its scratch
(``<data dir>/scratch/<pack>``, seen as ``/inline/scratch``). The host's data dir (run store,
secrets, tokens, other packs) is never in its view, nor the user's home: the home (a default
input root) is left out, and a root holding the data dir has the data dir masked.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from inline_registry import Confinement, MergedRegistry, sandbox_problem

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
            reopened=self.reopened(models),
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

    def reopened(self, models: tuple[Path, ...]) -> tuple[Path, ...]:
        """Folders of the (masked) data dir a worker reads: the inputs, the asset blobs, and
        the ``models`` folders inside it."""
        s = self.settings
        inputs = s.data_dir / "inputs"
        return tuple(p for p in (inputs, s.blobs_dir / "sha256") if p.exists()) + tuple(
            r for r in models if _holds(s.data_dir, r)
        )

    def env_changes(self) -> dict[str, str]:
        """Variables a worker loses: any ``INLINE_*`` naming a path in the data dir."""
        data = str(self.settings.data_dir)
        return {k: "" for k, v in os.environ.items() if k.startswith("INLINE_") and data in v}


def _holds(outer: Path, inner: Path) -> bool:
    return inner == outer or inner.is_relative_to(outer)
