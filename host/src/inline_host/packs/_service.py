"""The pack operations as the host serves them (Studio, the HTTP layer): in-process, async.

Each operation runs the blocking ``PackManager`` in a worker thread, then reloads the engine's
registry: new calls use the new version at once, calls in flight finish on the old one. The
progress callback is called from that worker thread (hand it to the event loop with
``anyio.from_thread.run_sync`` if it touches async state).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TypeVar

import anyio
from inline_registry import (
    InstallResult,
    PackManager,
    PackRow,
    ScanReport,
    Step,
    SyncResult,
)

from ..runs import Engine

T = TypeVar("T")


class PackService:
    """Install, upgrade, roll back, remove, sync and switch packs of a running engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._lock = anyio.Lock()

    def manager(self, progress: Callable[[Step], None] | None = None) -> PackManager:
        """A manager over the engine's data dir."""
        s = self.engine.settings
        return PackManager(s.data_dir, extra=s.extra_packs, progress=progress)

    async def _run(self, fn: Callable[[], T], *, reload: bool = True) -> T:
        async with self._lock:
            result = await anyio.to_thread.run_sync(fn)
            if reload:
                await self.engine.reload_registry()
            return result

    async def install(
        self,
        source: str,
        *,
        ref: str | None = None,
        allow: Sequence[str] = (),
        allow_local_sources: bool = False,
        progress: Callable[[Step], None] | None = None,
    ) -> InstallResult:
        """``inline pack install SOURCE``."""
        m = self.manager(progress)
        return await self._run(
            partial(
                m.install, source, ref=ref, allow=allow, allow_local_sources=allow_local_sources
            )
        )

    async def upgrade(
        self,
        name: str,
        *,
        to: str | None = None,
        allow: Sequence[str] = (),
        progress: Callable[[Step], None] | None = None,
    ) -> InstallResult:
        """``inline pack upgrade NAME [--to VERSION]``."""
        return await self._run(partial(self.manager(progress).upgrade, name, to=to, allow=allow))

    async def rollback(
        self, name: str, *, progress: Callable[[Step], None] | None = None
    ) -> InstallResult:
        """``inline pack rollback NAME``."""
        return await self._run(partial(self.manager(progress).rollback, name))

    async def remove(self, name: str) -> None:
        """``inline pack remove NAME``."""
        await self._run(partial(self.manager().remove, name))

    async def sync(self, *, progress: Callable[[Step], None] | None = None) -> list[SyncResult]:
        """``inline pack sync``."""
        return await self._run(self.manager(progress).sync)

    async def set_node_enabled(self, node_type: str, enabled: bool) -> None:
        """Switch one node type on or off, live."""
        await self._run(partial(self.manager().set_node_enabled, node_type, enabled))

    async def scan(self, source: str, *, ref: str | None = None) -> ScanReport:
        """The scan report of a source, nothing installed."""
        return await self._run(partial(self.manager().scan, source, ref=ref), reload=False)

    async def list(self) -> list[PackRow]:
        """``inline pack list`` (no worker is started)."""
        return await self._run(self.manager().list, reload=False)
