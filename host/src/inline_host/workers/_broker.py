"""The memory broker: one budget across every worker, placements from the policy, LRU eviction.

A worker asks (``PlaceAsk``) before it loads and reports (``Holding``) what it keeps. The broker
answers with ``inline_core.place`` run on the probed inventory (psutil, nvidia-ml-py: no torch),
the profile and the budget; when the models other workers hold leave too little room on the
device the plan needs, it asks them (``Evict``) to free their least-recently-used models first,
and waits for their reports. What cannot be made to fit is answered ``fits=False`` with the sizes,
before anything loads.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any, cast

import anyio
from inline_core import Budget, Component, Estimate, Inventory, Placement, place
from inline_core._policy import GPU_RESERVE, RAM_SHARE, Profile
from inline_sdk.protocol import ComponentPlan, HeldModel, Holding, PlaceAsk, Placed

from ._inventory import probe
from ._parallel import parallel_problem, parse_parallel, plan_parallel

#: How long the broker waits for a worker to report after it was asked to evict.
EVICT_WAIT = 30.0
ROLES = ("diffusion", "text-encoder", "vae", "other")
PROFILES = ("gpu-max", "lowvram", "cpu")


@dataclass
class WorkerLedger:
    """What one worker holds, as it last reported."""

    pack: str
    pid: int | None
    #: The one GPU the worker sees (a pool's replica pinned to it), None for all of them.
    gpu: int | None = None
    models: list[HeldModel] = field(default_factory=list)
    changed: anyio.Event = field(default_factory=anyio.Event)


EvictFn = Callable[[list[str]], Awaitable[None]]


class Broker:
    """Shares the machine's memory between workers (one per host)."""

    def __init__(
        self,
        inventory: Inventory | None = None,
        profile: str | None = None,
        budget: Budget | None = None,
        parallel: str | None = None,
        parallel_device: str | None = None,
    ) -> None:
        parse_parallel(parallel)  # a malformed INLINE_PARALLEL fails at startup, named
        #: ``INLINE_PARALLEL`` as set (see ``_parallel``), and ``INLINE_PARALLEL_DEVICE``.
        self.parallel, self.parallel_device = parallel, parallel_device
        self.inventory = inventory if inventory is not None else probe()
        problem = parallel_problem(parallel, self.inventory, parallel_device)
        if problem is not None:  # degrees that do not match the GPUs never run as CPU ranks
            raise ValueError(problem)
        default = "gpu-max" if self.inventory.gpus else "cpu"
        chosen = profile or default
        if chosen not in PROFILES:
            raise ValueError(
                f"INLINE_PROFILE={chosen!r} is not a profile: use one of {', '.join(PROFILES)}"
            )
        self.profile: Profile = cast(Profile, chosen)
        self.budget = budget if budget is not None else Budget()
        self._workers: dict[str, WorkerLedger] = {}
        self._evictors: dict[str, EvictFn] = {}
        self._plans: dict[tuple[str, str], dict[str, Any]] = {}
        self._lock = anyio.Lock()

    # capacity -----------------------------------------------------------------------------
    def capacity(self, device: str, gpu: int | None = None) -> int:
        """Bytes of weights the broker lets workers keep on ``device`` (``cuda`` or ``cpu``):
        on GPU ``gpu`` (by index) where given, else on the smallest."""
        if device.startswith("cuda") and self.inventory.gpus:
            gpus = self._gpus(gpu)
            total = min(g.total_bytes for g in gpus)
            return self.budget.vram_bytes if self.budget.vram_bytes is not None else total
        if self.budget.ram_bytes is not None:
            return self.budget.ram_bytes
        return int(self.inventory.ram_total_bytes * RAM_SHARE)

    def used(
        self,
        device: str,
        *,
        skip: str | None = None,
        slots: set[str] | None = None,
        gpu: int | None = None,
    ) -> int:
        """Bytes held on ``device`` (with ``gpu``, on that GPU only: each replica of a pool
        pinned to its own is planned on its own), leaving out worker ``skip``'s ``slots``
        (about to be replaced: a slot frees what it held before it loads)."""
        total = 0
        for key, ledger in self._workers.items():
            if not self._shares(ledger, device, gpu):
                continue
            for m in ledger.models:
                if key == skip and slots is not None and m.slot in slots:
                    continue
                if _where(m.plan) == _kind(device):
                    total += m.bytes
        return total

    def gpu_of(self, key: str) -> int | None:
        """The GPU worker ``key`` is pinned to (None: it sees every GPU)."""
        ledger = self._workers.get(key)
        return None if ledger is None else ledger.gpu

    def _gpus(self, gpu: int | None) -> tuple[Any, ...]:
        pinned = tuple(g for g in self.inventory.gpus if g.index == gpu)
        return pinned if gpu is not None and pinned else self.inventory.gpus

    def _inventory_for(self, key: str) -> Inventory:
        """What worker ``key`` can use: the machine, with only its GPU where it is pinned."""
        gpu = self.gpu_of(key)
        if gpu is None:
            return self.inventory
        return replace(self.inventory, gpus=self._gpus(gpu))

    @staticmethod
    def _shares(ledger: WorkerLedger, device: str, gpu: int | None) -> bool:
        """Whether ``ledger``'s models on ``device`` count against GPU ``gpu``'s room (a worker
        that sees every GPU loads on the first one)."""
        if gpu is None or not device.startswith("cuda"):
            return True
        return (ledger.gpu if ledger.gpu is not None else 0) == gpu

    # the protocol -------------------------------------------------------------------------
    def attach(
        self, key: str, pack: str, pid: int | None, evict: EvictFn | None, gpu: int | None = None
    ) -> None:
        """A worker started (``evict`` is None for workers too old to evict on request;
        ``gpu``: the one GPU it sees, where its pool pinned it)."""
        self._workers[key] = WorkerLedger(pack, pid, gpu)
        if evict is not None:
            self._evictors[key] = evict

    def detach(self, key: str) -> None:
        """A worker is gone, and its memory with it."""
        self._workers.pop(key, None)
        self._evictors.pop(key, None)
        for k in [k for k in self._plans if k[0] == key]:
            del self._plans[k]

    def held(self, key: str) -> list[str]:
        """The names (paths) of the models worker ``key`` holds, as it last reported."""
        ledger = self._workers.get(key)
        return [] if ledger is None else [m.name for m in ledger.models]

    def report(self, key: str, msg: Holding) -> None:
        """A worker's ``Holding``."""
        ledger = self._workers.get(key)
        if ledger is None:
            return
        ledger.models = list(msg.models)
        ledger.changed.set()
        ledger.changed = anyio.Event()

    async def place(self, key: str, ask: PlaceAsk) -> Placed:
        """Answer a ``PlaceAsk``: the policy's plan, after making room elsewhere if needed."""
        async with self._lock:  # one placement at a time: room made for one is not taken by another
            return await self._place(key, ask)

    async def _place(self, key: str, ask: PlaceAsk) -> Placed:
        slots = {c.slot for c in ask.components if c.slot}
        estimate = Estimate(
            components=tuple(
                Component(c.name, _role(c.role), c.params, c.bytes) for c in ask.components
            ),
            activation_bytes=ask.activation_bytes,
        )
        inventory, gpu = self._inventory_for(key), self.gpu_of(key)
        alone = place(inventory, estimate, self.profile, self.budget)
        if not alone.fits:
            return _answer(ask, alone)
        device = alone.device

        def room() -> int:
            return self.capacity(device, gpu) - self.used(device, slots=slots, skip=key, gpu=gpu)

        need = _resident(alone)
        if need > room():
            await self._make_room(key, device, need - room(), gpu)
        chosen = alone
        if need > (left := room()):  # what others keep could not be evicted: fit into the rest
            chosen = place(inventory, estimate, self.profile, self._shrunk(device, left))
        if chosen.fits:
            for c in chosen.components:
                self._plans[(key, c.name)] = {"reason": chosen.reason}
        return _answer(
            ask, chosen, plan_parallel(self.parallel, inventory, chosen, self.parallel_device)
        )

    def _shrunk(self, device: str, room: int) -> Budget:
        if device.startswith("cuda"):
            return Budget(vram_bytes=max(0, room) + GPU_RESERVE, ram_bytes=self.budget.ram_bytes)
        return Budget(vram_bytes=self.budget.vram_bytes, ram_bytes=max(0, room))

    async def _make_room(self, key: str, device: str, short: int, gpu: int | None) -> None:
        """Ask other workers to free their least-recently-used models on ``device`` (on GPU
        ``gpu`` only, where given)."""
        candidates = sorted(
            (
                (m.last_used, other, m)
                for other, ledger in self._workers.items()
                if other != key and other in self._evictors and self._shares(ledger, device, gpu)
                for m in ledger.models
                if _where(m.plan) == _kind(device)
            ),
            key=lambda t: t[0],
        )
        chosen: dict[str, list[str]] = {}
        freed = 0
        for _, other, m in candidates:
            if freed >= short:
                break
            chosen.setdefault(other, []).append(m.slot)
            freed += m.bytes
        for other, slots in chosen.items():
            ledger = self._workers[other]
            changed = ledger.changed
            await self._evictors[other](slots)
            with anyio.move_on_after(EVICT_WAIT):
                while any(m.slot in slots for m in ledger.models):
                    await changed.wait()
                    changed = ledger.changed

    # what /v1/health shows -------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """The budget, what each worker holds and the plan each loaded model was given."""
        mb = 1 << 20
        devices = ["cpu"] + (["cuda"] if self.inventory.gpus and self.profile != "cpu" else [])
        workers = []
        for key, ledger in self._workers.items():
            workers.append(
                {
                    "pack": ledger.pack,
                    "pid": ledger.pid,
                    **({"gpu": ledger.gpu} if ledger.gpu is not None else {}),
                    "models": [
                        {
                            "slot": m.slot,
                            "file": m.name,
                            "bytes": m.bytes,
                            "lastUsed": m.last_used,
                            "plan": {
                                "device": m.plan.device,
                                "dtype": m.plan.dtype,
                                "quantization": m.plan.quantization,
                                "offload": m.plan.offload,
                            },
                            **self._plans.get((key, m.name), {}),
                        }
                        for m in ledger.models
                    ],
                }
            )
        return {
            "profile": self.profile,
            "parallel": self.parallel or "auto",
            "budget": {
                d: {
                    "bytes": self.capacity(d),
                    "usedBytes": self.used(d),
                    "mb": self.capacity(d) // mb,
                }
                for d in devices
            },
            "workers": workers,
            "at": time.time(),
        }


def _role(role: str) -> Any:
    return role if role in ROLES else "other"


def _kind(device: str) -> str:
    return "cuda" if device.startswith("cuda") else "cpu"


def _where(plan: ComponentPlan) -> str:
    """Where a held model's weights live: offloaded models live in system RAM between uses."""
    if plan.offload != "resident":
        return "cpu"
    return _kind(plan.device)


def _resident(p: Placement) -> int:
    """Bytes the plan keeps on its device between calls."""
    return sum(c.bytes for c in p.components if c.offload == "resident")


def _answer(
    ask: PlaceAsk, p: Placement, split: tuple[str | None, list[str]] = (None, [])
) -> Placed:
    return Placed(
        ask=ask.ask,
        fits=p.fits,
        reason=p.reason,
        components=[
            ComponentPlan(
                name=c.name,
                role=c.role,
                device=c.device,
                dtype=c.dtype,
                quantization=c.quantization,
                offload=c.offload,
                bytes=c.bytes,
            )
            for c in p.components
        ],
        park_text_encoder=p.park_text_encoder,
        vae_tiling=p.vae_tiling,
        attention=p.attention,
        parallel=split[0] if p.fits else None,
        devices=split[1] if p.fits else [],
    )
