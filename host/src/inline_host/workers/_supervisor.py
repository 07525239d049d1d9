"""The supervisor: a pool of workers (replicas) per pack, started on first use, replaced after a
death.

A pack runs as one replica unless told more (``set_replicas``): replicas start as calls need
them, up to that count. A call whose inputs are handles goes to the replica that made them; a
call whose params pick a model file goes to an idle replica that holds that model (the memory
broker's ledger says which), else to an idle one that holds none; any other call goes to the
replica with the fewest calls in flight, and a new replica starts while every live one is busy
(or holds another model) and the pool is not full. A replica that dies fails
only its own calls in flight; the next call that needs one starts another.

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
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
from inline_registry import MergedRegistry, PackInfo, RegistryError, prepare_env
from inline_sdk.protocol import Progress

from .._errors import PackStartFailed
from .._settings import Settings
from .._values import PREPARING, EventCallback, HostValue, owned_handles
from ._broker import Broker
from ._bulk import HostBulk
from ._choice import Launchers
from ._launcher import WorkerLauncher
from ._process import SecretsReader, WorkerProcess

if TYPE_CHECKING:
    from ._serve import ServeDeployments, ServedPack

log = logging.getLogger("inline.workers")


def preparing(pack: str) -> str:
    """What a node's progress says while its pack's venv is built on first use."""
    return f"Preparing the venv of pack '{pack}' (first use; torch packs take a minute)"


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
        on_resize: Callable[[str], None] | None = None,
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
        self._pools: dict[str, list[WorkerProcess]] = {}
        self._sizes: dict[str, int] = {}
        #: Replicas per pack that stay up however long they idle (a deployment's size).
        self._kept: dict[str, int] = {}
        self._on_resize = on_resize
        self._locks: dict[str, anyio.Lock] = {}
        self._generations: dict[str, int] = {}
        self._on_worker_exit = on_worker_exit
        self._retiring: set[WorkerProcess] = set()
        self._reaping = False
        #: Deployments on Ray Serve (``INLINE_RAY_ADDRESS``), made on the first one.
        self._serve: ServeDeployments | None = None

    def workers(self) -> dict[str, WorkerProcess]:
        """Each pack's first live replica, by pack."""
        out: dict[str, WorkerProcess] = {}
        for pack, pool in self._pools.items():
            live = next((w for w in pool if w.alive), None)
            if live is not None:
                out[pack] = live
        return out

    def pool(self, pack: str) -> list[WorkerProcess]:
        """The pack's live replicas, oldest first."""
        return [w for w in self._pools.get(pack, ()) if w.alive]

    def replicas(self, pack: str) -> int:
        """How many replicas the pack may run at once (1 unless ``set_replicas`` said more)."""
        return self._sizes.get(pack, 1)

    def set_replicas(self, pack: str, count: int, *, keep: int = 0) -> None:
        """Let ``pack`` run up to ``count`` replicas (at least one), ``keep`` of them up even
        when idle. Replicas beyond a smaller count finish the calls they are running, then
        stop. ``on_resize`` hears of it (node slots follow the count)."""
        if count < 1:
            raise ValueError(f"a pack runs at least one replica, not {count}")
        self._sizes[pack] = count
        self._kept[pack] = min(keep, count)
        pool = self._pools.get(pack, [])
        usable = [w for w in pool if w.usable()]
        for proc in usable[count:]:
            self._retire_soon(pack, proc)
        if self._on_resize is not None:
            self._on_resize(pack)

    def retire_all(self, pack: str) -> None:
        """Stop every replica of ``pack`` once its calls end (the next call starts one)."""
        for proc in list(self._pools.get(pack, ())):
            self._retire_soon(pack, proc)

    async def add_replica(self, pack: str) -> WorkerProcess:
        """Start one more replica of ``pack`` now, if its pool has room; the newest one if not."""
        async with self._locks.setdefault(pack, anyio.Lock()):
            pool = self.pool(pack)
            if len(pool) >= self.replicas(pack):
                return pool[-1]
            return await self._start(pack)

    async def worker(
        self, pack: str, *, owner: int | None = None, wants: frozenset[str] = frozenset()
    ) -> WorkerProcess:
        """A live replica of ``pack`` for one call: the replica of generation ``owner`` (the
        one whose handles the call takes) while it lives, else one holding a model file in
        ``wants``, else the least busy, starting one as the module says. A replica whose exit
        is seen (even before its reader noticed) is never chosen."""
        chosen = self._choose(pack, owner, wants)
        if chosen is not None:
            return chosen
        lock = self._locks.setdefault(pack, anyio.Lock())
        async with lock:
            chosen = self._choose(pack, owner, wants)
            if chosen is not None:
                return chosen
            return await self._start(pack)

    def _choose(self, pack: str, owner: int | None, wants: frozenset[str]) -> WorkerProcess | None:
        """A replica to take a call now, or None where one should start."""
        usable = [w for w in self._pools.get(pack, ()) if w.usable()]
        if owner is not None:
            for w in usable:
                if w.generation == owner:
                    return w
        if not usable:
            return None
        room = len(usable) < self.replicas(pack)
        if wants and len(usable) + room > 1:  # a choice to make: the model decides
            idle = [w for w in usable if not w.pending]
            held = {w: self.broker.held(w.shm_prefix) for w in idle}
            for w in idle:
                if any(_names(path, wants) for path in held[w]):
                    return w
            empty = [w for w in idle if not held[w]]
            if empty:
                return empty[0]
            if room:
                return None  # each idle replica holds another model: a new one takes this
        least = min(usable, key=lambda w: len(w.pending))
        if least.pending and room:
            return None  # every replica is busy and there is room for one more
        return least

    async def _start(self, pack: str) -> WorkerProcess:
        if not self._reaping and self.settings.worker_idle > 0:
            self._reaping = True
            self._tg.start_soon(self._reap)
        info = self.registry.packs.get(pack)
        if info is None:
            raise PackStartFailed(pack, "no such pack is registered")
        gen = self._generations.get(pack, 0) + 1
        self._generations[pack] = gen
        launcher = self.launchers.for_pack(pack, info.sdk_version)
        proc = WorkerProcess(
            pack,
            gen,
            self.settings,
            self._exited,
            launcher=launcher,
            secrets=self._secrets,
            bulk=self.bulk,
            broker=self.broker,
            gpu=self._gpu_for(pack, info) if launcher.name != "ray" else None,
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
        pool = self._pools.setdefault(pack, [])
        pool[:] = [w for w in pool if w.alive]  # the dead leave as a new one comes
        pool.append(proc)
        return proc

    def _gpu_for(self, pack: str, info: PackInfo) -> int | None:
        """The GPU a new replica of ``pack`` is pinned to: where the pool may run more than
        one replica of a pack whose nodes load model files, on a machine of several GPUs, the
        first GPU none of its live replicas has (else the one fewest have); None otherwise
        (one replica sees every GPU, as a single worker always has)."""
        gpus = self.broker.inventory.gpus
        if (
            len(gpus) < 2
            or self.replicas(pack) < 2
            or self.broker.profile == "cpu"
            or not any(n.models for n in info.manifest.nodes.values())
        ):
            return None
        taken = [w.gpu for w in self.pool(pack)]
        return min((g.index for g in gpus), key=lambda i: (taken.count(i), i))

    def _retire_soon(self, pack: str, proc: WorkerProcess) -> None:
        """Take ``proc`` out of its pool: it finishes its calls, then stops."""
        pool = self._pools.get(pack, [])
        if proc in pool:
            pool.remove(proc)
        self._retiring.add(proc)
        self._tg.start_soon(self._retire, proc)

    def set_registry(self, registry: MergedRegistry) -> None:
        """Serve ``registry`` from now on. A pack whose venv changed (upgrade, rollback) or that
        is gone gets a new worker on its next call; its old worker finishes the calls it is
        running (they complete on the old version), then stops."""
        self.registry = registry
        for pack, pool in list(self._pools.items()):
            info = registry.packs.get(pack)
            for proc in list(pool):
                if info is None or str(info.env.python) != proc.python:
                    self._retire_soon(pack, proc)

    async def _retire(self, proc: WorkerProcess) -> None:
        try:
            while proc.alive and proc.pending:
                await anyio.sleep(0.05)
            await proc.stop()
        finally:
            self._retiring.discard(proc)

    async def _reap(self) -> None:
        """Stop replicas that had no call for ``settings.worker_idle`` seconds."""
        idle = self.settings.worker_idle
        while True:
            await anyio.sleep(max(0.05, min(idle / 4, 5.0)))
            now = time.monotonic()
            for pack, pool in list(self._pools.items()):
                spare = sum(1 for w in pool if w.alive) - self._kept.get(pack, 0)
                for proc in list(pool):
                    if spare <= 0:
                        break  # the rest are a deployment's: they stay however idle
                    if proc.alive and not proc.pending and now - proc.last_active >= idle:
                        pool.remove(proc)  # the next call starts a fresh one
                        spare -= 1
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
        """Run a node in a replica of its pack (the one that made its input handles, if any);
        through its Serve deployment where it has one."""
        served = self.served(pack)
        if served is not None:
            assert self._serve is not None
            return await self._serve.call(
                served, node_type, node_id, params, inputs, on_event,
                self.settings.call_timeout if timeout is None else timeout,
                self._models_of(node_type, params),
            )  # fmt: skip
        owner = next(
            (
                hv.generation
                for values in inputs.values()
                for hv in values
                if hv.pack == pack and owned_handles([hv.value])
            ),
            None,
        )
        # which model a call picks matters only where there is a replica to choose
        wants = self._models_of(node_type, params) if self.replicas(pack) > 1 else frozenset()
        info = self.registry.packs.get(pack)
        if (
            on_event is not None
            and info is not None
            and not self._pools.get(pack)  # a live replica's venv is built (no file read)
            and not info.env.ready
        ):
            # its venv is built on this first call (tens of seconds for torch): say so
            on_event(Progress(id=0, phase=PREPARING, fraction=0.0, status=preparing(pack)))
        proc = await self.worker(pack, owner=owner, wants=wants)
        return await proc.call(
            node_type,
            node_id,
            params,
            inputs,
            on_event,
            self.settings.call_timeout if timeout is None else timeout,
        )

    def _models_of(self, node_type: str, params: dict[str, Any]) -> frozenset[str]:
        """The model files a call's params pick (the values of its picker params)."""
        entry = self.registry.entries.get(node_type)
        if entry is None:
            return frozenset()
        return frozenset(
            value
            for p in entry.descriptor.params
            if p.options_from and isinstance(value := params.get(p.key), str) and value
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
            served = self.served(pack)
            if served is not None and gen < 0 and self._serve is not None:
                await self._serve.release(served, gen, ids)
                continue
            proc = next((w for w in self._pools.get(pack, ()) if w.generation == gen), None)
            if proc is not None:
                await proc.release(ids)

    # Ray Serve ----------------------------------------------------------------------------------
    def served(self, pack: str) -> ServedPack | None:
        """The pack's Serve deployment, if it has one."""
        return self._serve.served.get(pack) if self._serve is not None else None

    def _serving(self) -> ServeDeployments:
        if self._serve is None:
            from ._ray_placement import pack_demand
            from ._serve import ServeDeployments

            join = getattr(self.launchers.configured, "join", None)
            if join is None:
                raise PackStartFailed("(serve)", "deployments on Ray need the Ray launcher")
            self._serve = ServeDeployments(
                self.settings,
                join,
                lambda pack, gpus: pack_demand(self.registry, self.settings, pack, gpus),
                self.bulk,
                self._secrets,
                self.launchers.sandboxing.trust,
            )
        return self._serve

    async def deploy_served(
        self,
        name: str,
        pack: str,
        *,
        node: str,
        low: int,
        high: int,
        scaling: dict[str, float],
        model: str | None,
        per_node: int | None = None,
        warm: dict[str, Any] | None = None,
        requirements: Mapping[str, Any] | None = None,
    ) -> ServedPack:
        """Deploy ``pack`` on Ray Serve as ``name`` (``low``..``high`` replicas); its calls go
        there from now on; a replica takes as many calls at once as ``node`` does (its
        concurrency) and, with ``warm`` (params of ``node``), runs its warm hook before it
        counts as started; ``requirements`` (the model card's) replace the pack's demand
        where given. Returns once Serve runs it; ``PackStartFailed`` if it cannot."""
        info = self.registry.packs.get(pack)
        if info is None:
            raise PackStartFailed(pack, "no such pack is registered")
        python = info.env.python
        if not info.env.ready:
            python = (await anyio.to_thread.run_sync(prepare_env, info.env)).python
        entry = self.registry.entries.get(node)
        concurrency = entry.descriptor.concurrency if entry is not None else 1
        self.retire_all(pack)  # its local replicas (if any) finish their calls and stop
        return await self._serving().deploy(
            name, pack, python, low=low, high=high, scaling=scaling,
            concurrency=concurrency, model=model, per_node=per_node,
            warm=None if warm is None else {"node": node, "params": warm},
            requirements=requirements,
        )  # fmt: skip

    async def undeploy_served(self, pack: str) -> None:
        """Delete the pack's Serve deployment; its next call starts a local replica again."""
        if self._serve is not None:
            await self._serve.undeploy(pack)

    async def look_served(self, pack: str) -> None:
        """Refresh where the pack's Serve replicas run (at most once a second)."""
        served = self.served(pack)
        if served is not None and self._serve is not None:
            await self._serve.look(served)

    async def aclose(self) -> None:
        """Stop every worker."""
        with anyio.CancelScope(shield=True):
            for proc in [*(w for pool in self._pools.values() for w in pool), *self._retiring]:
                await proc.stop()
            if self._serve is not None:  # the deployments run on; this host's handles go
                await self._serve.aclose()
            self.bulk.close()


def _names(path: str, wants: frozenset[str]) -> bool:
    """Whether the model at ``path`` is one a call picked (by its name, or its path's end)."""
    return any(path == w or path.endswith("/" + w) for w in wants)
