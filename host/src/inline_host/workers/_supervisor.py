"""The supervisor: one worker per pack, started on first use, restarted after a death.

Workers start through the ``WorkerLauncher`` the settings name (``INLINE_LAUNCHER``); see
``_process`` for one worker's protocol. A worker that hangs costs its own calls (per-call
timeout, then the worker is stopped); the host carries on. A worker with no call for
``settings.worker_idle`` seconds is stopped (the next call starts a fresh one). When the
registry changes (a pack upgraded, rolled back or removed), the pack's old worker finishes the
calls it is running and stops; new calls go to a worker of the new version. A worker's death
is seen at once (its process's exit or its stream's end, before its reader gets there): no call
goes to a dead worker, and handles it made are refused by its successor (``HandlesGone``; the
run computes their producers again).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc
from inline_registry import MergedRegistry, RegistryError, prepare_env

from .._errors import PackStartFailed
from .._settings import Settings
from .._values import EventCallback, HostValue, owned_handles
from ._broker import Broker
from ._bulk import HostBulk
from ._choice import Launchers
from ._launcher import WorkerLauncher
from ._process import SecretsReader, WorkerProcess

log = logging.getLogger("inline.workers")


class Supervisor:
    """Owns the workers of every pack; its tasks live in the task group it is given."""

    def __init__(
        self,
        registry: MergedRegistry,
        settings: Settings,
        tg: anyio.abc.TaskGroup,
        *,
        broker: Broker,
        secrets: SecretsReader | None = None,
        on_worker_exit: Callable[[str, int], None] | None = None,
        launcher: WorkerLauncher | None = None,
    ) -> None:
        self.registry = registry
        self.settings = settings
        self.launchers = Launchers(settings, lambda: self.registry, launcher)
        #: The host's side of bulk bytes (workers' shared memory, the host's own arena).
        self.bulk = HostBulk()
        self._tg = tg
        #: Shares memory between the workers.
        self.broker = broker
        #: The secrets a call asks for (none are handed to a worker without this).
        self._secrets = secrets
        self._workers: dict[str, WorkerProcess] = {}
        self._locks: dict[str, anyio.Lock] = {}
        self._generations: dict[str, int] = {}
        self._on_worker_exit = on_worker_exit
        self._retiring: set[WorkerProcess] = set()
        self._reaping = False

    def workers(self) -> dict[str, WorkerProcess]:
        """Live workers by pack."""
        return {p: w for p, w in self._workers.items() if w.alive}

    async def worker(self, pack: str) -> WorkerProcess:
        """The pack's live worker, started (or restarted) on demand. A worker whose exit is
        seen (even before its reader noticed) is never chosen: the call goes to a fresh one."""
        current = self._workers.get(pack)
        if current is not None and current.usable():
            return current
        lock = self._locks.setdefault(pack, anyio.Lock())
        async with lock:
            current = self._workers.get(pack)
            if current is not None and current.usable():
                return current
            if not self._reaping and self.settings.worker_idle > 0:
                self._reaping = True
                self._tg.start_soon(self._reap)
            info = self.registry.packs.get(pack)
            if info is None:
                raise PackStartFailed(pack, "no such pack is registered")
            gen = self._generations.get(pack, 0) + 1
            self._generations[pack] = gen
            proc = WorkerProcess(
                pack,
                gen,
                self.settings,
                self._exited,
                launcher=self.launchers.for_pack(pack, info.sdk_version),
                secrets=self._secrets,
                bulk=self.bulk,
                broker=self.broker,
            )
            python = info.env.python
            if not info.env.ready:  # registered lazily: its venv is built on its first call
                log.warning("Preparing the venv of pack '%s' (first use)...", pack)
                started = time.monotonic()
                try:
                    python = (await anyio.to_thread.run_sync(prepare_env, info.env)).python
                except RegistryError as exc:
                    raise PackStartFailed(pack, str(exc)) from None
                took = time.monotonic() - started
                log.warning("The venv of pack '%s' is ready (%.0f s, first use).", pack, took)
            await proc.start(str(python), self._tg)
            self._workers[pack] = proc
            return proc

    def set_registry(self, registry: MergedRegistry) -> None:
        """Serve ``registry`` from now on. A pack whose venv changed (upgrade, rollback) or that
        is gone gets a new worker on its next call; its old worker finishes the calls it is
        running (they complete on the old version), then stops."""
        self.registry = registry
        for pack, proc in list(self._workers.items()):
            info = registry.packs.get(pack)
            if info is None or str(info.env.python) != proc.python:
                del self._workers[pack]
                self._retiring.add(proc)
                self._tg.start_soon(self._retire, proc)

    async def _retire(self, proc: WorkerProcess) -> None:
        try:
            while proc.alive and proc.pending:
                await anyio.sleep(0.05)
            await proc.stop()
        finally:
            self._retiring.discard(proc)

    async def _reap(self) -> None:
        """Stop workers that had no call for ``settings.worker_idle`` seconds."""
        idle = self.settings.worker_idle
        while True:
            await anyio.sleep(max(0.05, min(idle / 4, 5.0)))
            now = time.monotonic()
            for pack, proc in list(self._workers.items()):
                if proc.alive and not proc.pending and now - proc.last_active >= idle:
                    del self._workers[pack]  # the next call starts a fresh worker
                    await proc.stop()

    def _exited(self, proc: WorkerProcess) -> None:
        if self._on_worker_exit is not None:
            self._on_worker_exit(proc.pack, proc.generation)

    async def call(
        self,
        pack: str,
        node_type: str,
        node_id: str,
        params: dict[str, Any],
        inputs: dict[str, list[HostValue]],
        on_event: EventCallback | None = None,
        timeout: float | None = None,
    ) -> dict[str, HostValue]:
        """Run a node in its pack's worker."""
        proc = await self.worker(pack)
        return await proc.call(
            node_type,
            node_id,
            params,
            inputs,
            on_event,
            self.settings.call_timeout if timeout is None else timeout,
        )

    def release_soon(self, values: list[HostValue]) -> None:
        """Release ``values`` in the background (from synchronous code, such as an eviction);
        values that own nothing in a worker (text, inline bytes) need no task."""
        owning = [hv for hv in values if owned_handles([hv.value])]
        if owning:
            self._tg.start_soon(self.release, owning)

    async def release(self, values: list[HostValue]) -> None:
        """Release the worker-side resources behind ``values`` (handles, shm regions)."""
        by_worker: dict[tuple[str, int], list[int]] = {}
        for hv in values:
            ids = owned_handles([hv.value])
            if ids:
                by_worker.setdefault((hv.pack, hv.generation), []).extend(ids)
        for (pack, gen), ids in by_worker.items():
            proc = self._workers.get(pack)
            if proc is not None and proc.generation == gen:
                await proc.release(ids)

    async def aclose(self) -> None:
        """Stop every worker."""
        with anyio.CancelScope(shield=True):
            for proc in [*self._workers.values(), *self._retiring]:
                await proc.stop()
            self.bulk.close()
