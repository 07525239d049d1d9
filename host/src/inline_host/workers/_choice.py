"""The one place a worker's launcher is chosen.

The settings name it: Ray when ``INLINE_RAY_ADDRESS`` is set, else ``INLINE_LAUNCHER`` (``local``
or ``tcp``); a launcher handed in (tests, embedders) wins over both. A pack built on an SDK older
than 1.4 cannot dial a host, so it runs as a local child whatever was chosen (said once).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from inline_registry import MergedRegistry

from .._settings import Settings
from ._launcher import WorkerLauncher
from ._launchers import Confine, LocalLauncher, TcpLauncher
from ._ray_placement import pack_demand
from ._sandbox import Sandboxing

log = logging.getLogger("inline.workers")


def launcher_named(name: str, confine: Confine | None = None) -> WorkerLauncher:
    """The launcher ``INLINE_LAUNCHER`` names (``local`` or ``tcp``), sandboxing each worker
    as ``confine`` says."""
    if name == "local":
        return LocalLauncher(confine)
    if name == "tcp":
        return TcpLauncher(confine=confine)
    raise ValueError(f"INLINE_LAUNCHER must be 'local' or 'tcp', got {name!r}")


def ray_launcher(
    settings: Settings,
    registry: Callable[[], MergedRegistry],
    trust: Callable[[str], tuple[bool, bool]] = lambda _pack: (False, False),
) -> WorkerLauncher:
    """The ``RayLauncher`` for ``settings.ray_address``, placing by the current registry's
    manifests and sandboxing by ``trust`` (Ray itself is imported only on the first launch)."""
    from ._ray import RayLauncher

    return RayLauncher(
        settings, lambda pack, gpus: pack_demand(registry(), settings, pack, gpus), trust
    )


def _at_least(version: str, least: tuple[int, int]) -> bool:
    major, _, rest = version.partition(".")
    try:
        return (int(major), int(rest.partition(".")[0])) >= least
    except ValueError:
        return False


class Launchers:
    """The configured launcher, and the local one for packs that can only run as a child."""

    def __init__(
        self,
        settings: Settings,
        registry: Callable[[], MergedRegistry],
        launcher: WorkerLauncher | None = None,
    ) -> None:
        self.sandboxing = Sandboxing(settings, registry)
        if launcher is None:
            if settings.ray_address:
                launcher = ray_launcher(settings, registry, self.sandboxing.trust)
            else:
                launcher = launcher_named(settings.launcher, self.sandboxing.confinement)
        self.configured = launcher
        self.local = LocalLauncher(self.sandboxing.confinement)
        self._local_only: set[str] = set()

    def for_pack(self, pack: str, sdk_version: str) -> WorkerLauncher:
        """The configured launcher; the local one for a pack whose SDK predates workers that
        dial a host (1.4), which only runs as a local child."""
        if self.configured.name == "local" or _at_least(sdk_version, (1, 4)):
            return self.configured
        if pack not in self._local_only:
            self._local_only.add(pack)
            log.warning(
                "pack %s is built on SDK %s, which cannot run through the %s launcher: "
                "it runs locally",
                pack,
                sdk_version,
                self.configured.name,
            )
        return self.local
