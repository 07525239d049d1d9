"""The engine's health as a service: devices, memory, workers, storage, versions."""

from __future__ import annotations

from typing import Any

import anyio
import msgspec

from .._settings import Settings, versions
from ..models import budget_of
from ..runs import DeploymentService, Engine, RunService
from ..workers import probe

MB = 1 << 20


class Health(msgspec.Struct, frozen=True, rename="camel"):
    ok: bool
    api_version: str
    schema_versions: dict[str, int]
    registry_version: str
    device: dict[str, Any]
    workers: dict[str, Any]
    #: The memory broker: budget per device, what each worker holds, each model's plan.
    memory: dict[str, Any] = {}
    #: Runs executing and waiting, and node slots with calls waiting.
    runs: dict[str, Any] = {}
    #: Why the engine is not ok (storage failing...), when it is not.
    reason: str | None = None
    version: dict[str, Any] = {}
    #: Deployments: each one's replicas and where, state, load, queue and scaling decisions.
    deployments: list[Any] = []
    #: The workers' sandbox: ``mode`` (INLINE_SANDBOX), ``active`` (workers are sandboxed),
    #: ``problem`` (why they cannot be, here); each worker says ``sandboxed`` too.
    sandbox: dict[str, Any] = {}


class SystemService:
    """Answers ``/v1/health``."""

    def __init__(
        self,
        engine: Engine,
        runs: RunService,
        settings: Settings,
        deployments: DeploymentService | None = None,
    ) -> None:
        self._engine = engine
        self._runs = runs
        self._settings = settings
        self._deployments = deployments

    async def health(self) -> Health:
        engine, settings = self._engine, self._settings
        inventory = await anyio.to_thread.run_sync(probe)
        budget = budget_of(settings)
        profile = settings.profile or ("gpu-max" if inventory.gpus else "cpu")
        gpu = inventory.gpus[0] if inventory.gpus else None
        vram_budget = None
        if gpu is not None:
            vram_budget = (budget.vram_bytes or gpu.total_bytes) // MB
        device = {
            "kind": "cuda" if gpu is not None and profile != "cpu" else "cpu",
            "profile": profile,
            "vramBudgetMb": vram_budget,
            "vramFreeMb": None if gpu is None else gpu.free_bytes // MB,
            "ramFreeMb": inventory.ram_free_bytes // MB,
            "ramTotalMb": inventory.ram_total_bytes // MB,
            "gpus": [
                {
                    "index": g.index,
                    "name": g.name,
                    "totalMb": g.total_bytes // MB,
                    "freeMb": g.free_bytes // MB,
                    "bf16": g.bf16,
                }
                for g in inventory.gpus
            ],
        }
        workers = {
            pack: {
                "pid": w.pid,
                "generation": w.generation,
                "callsInFlight": len(w.running),
                "replicas": len(engine.supervisor.pool(pack)),
                **w.describe(),
            }
            for pack, w in engine.supervisor.workers().items()
        }
        storage = await self._runs.storage_status()
        return Health(
            ok=storage is None,
            api_version="v1",
            schema_versions={"min": 1, "max": 1},
            registry_version=engine.registry_version(),
            device=device,
            workers=workers,
            memory=engine.supervisor.broker.snapshot(),
            runs=self._runs.load(),
            reason=None if storage is None else f"storage is failing: {storage}",
            version=versions(),
            deployments=[]
            if self._deployments is None
            else msgspec.to_builtins(self._deployments.views()),
            sandbox=await anyio.to_thread.run_sync(engine.supervisor.launchers.sandboxing.describe),
        )
