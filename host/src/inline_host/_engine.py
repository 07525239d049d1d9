"""The engine: the merged registry, the supervisor, the output cache and the kernel, together."""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
from inline_core import (
    GraphNode,
    NullListener,
    OutputCache,
    Plan,
    PlannedNode,
    RunListener,
    execute_plan,
    parse_request,
    plan,
)
from inline_registry import MergedRegistry, load_registry
from inline_sdk import HANDLE_KINDS, Descriptor
from inline_sdk.protocol import (
    HandleValue,
    InlineBytes,
    JsonValue,
    MediaValue,
    SegmentReader,
    ShmRef,
    TextValue,
)

from ._blobs import BlobStore
from ._catalogs import ModelCatalogs, serve_descriptor
from ._errors import InlineHostError
from ._settings import Settings
from ._supervisor import HostValue, Supervisor


@dataclass(frozen=True, slots=True)
class RunResult:
    """What a finished run produced: the plan and the target node's outputs."""

    plan: Plan
    outputs: dict[str, HostValue]


class PackExecutor:
    """The kernel's ``Executor``: sends planned nodes to their pack's worker."""

    def __init__(self, supervisor: Supervisor) -> None:
        self.supervisor = supervisor

    async def execute(
        self, node: PlannedNode, inputs: dict[str, list[Any]], report: Any
    ) -> dict[str, Any]:
        wire: dict[str, list[Any]] = {}
        for port, values in inputs.items():
            for hv in values:
                if isinstance(hv.value, HandleValue) and hv.pack != node.pack:
                    raise InlineHostError(
                        f"Cannot pass a {hv.value.kind} handle from pack '{hv.pack}' to node "
                        f"'{node.id}' of pack '{node.pack}'"
                    )
            wire[port] = [hv.value for hv in values]

        def on_event(event: Any) -> None:
            report.progress(node.id, event)

        return await self.supervisor.call(
            node.pack, node.type, node.id, node.params, wire, on_event
        )


class Engine:
    """Validates, plans and runs graphs through pack workers."""

    def __init__(
        self,
        settings: Settings,
        registry: MergedRegistry,
        supervisor: Supervisor,
        cache: OutputCache,
    ) -> None:
        self.settings = settings
        self.registry = registry
        self.supervisor = supervisor
        self.cache = cache
        self.blobs = BlobStore(settings.blobs_dir)
        self.executor = PackExecutor(supervisor)
        self.catalogs = ModelCatalogs(settings.models_roots)
        self._reader = SegmentReader()
        self._file_hashes: dict[tuple[str, int, int], str] = {}

    @classmethod
    @asynccontextmanager
    async def open(
        cls, settings: Settings | None = None, *, say: Callable[[str], None] | None = None
    ) -> AsyncIterator[Engine]:
        """Load the registry (building pack venvs on first use) and run the engine's tasks."""
        settings = settings or Settings.from_env()
        for d in (settings.data_dir, settings.models_dir, settings.blobs_dir):
            d.mkdir(parents=True, exist_ok=True)
        ModelCatalogs(settings.models_roots).ensure_folders()
        registry = await anyio.to_thread.run_sync(
            lambda: load_registry(settings.packs_dir, settings.extra_packs, say=say)
        )
        try:
            async with anyio.create_task_group() as tg:
                holder: list[Engine] = []
                cache = OutputCache(
                    max_entries=settings.cache_entries,
                    on_evict=lambda _k, outs: holder[0]._evicted(outs),
                )
                supervisor = Supervisor(
                    registry, settings, tg, on_worker_exit=lambda p, g: holder[0]._worker_gone(p, g)
                )
                engine = cls(settings, registry, supervisor, cache)
                holder.append(engine)
                try:
                    yield engine
                finally:
                    await supervisor.aclose()
                    tg.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # The engine's own tasks never fail; what arrives here is the caller's exception.
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from group.exceptions[0].__cause__
            raise

    # cache hygiene -------------------------------------------------------------------------------
    def _evicted(self, outputs: dict[str, Any]) -> None:
        values = [v for v in outputs.values() if isinstance(v, HostValue)]
        if values:
            self.supervisor._tg.start_soon(self.supervisor.release, values)

    def _worker_gone(self, pack: str, generation: int) -> None:
        """Outputs that lived in a dead worker are gone with it: forget them."""
        self.cache.discard_where(
            lambda outs: any(
                isinstance(v, HostValue)
                and v.pack == pack
                and v.generation == generation
                and not _portable_after_death(v)
                for v in outs.values()
            )
        )

    # descriptors ----------------------------------------------------------------------------
    def descriptors(self) -> list[Descriptor]:
        """Every node's descriptor as served now (pickers filled from the models dir)."""
        return [
            serve_descriptor(d, self.registry.node_manifest(d.type), self.catalogs)
            for d in self.registry.descriptors()
        ]

    def descriptor(self, node_type: str) -> Descriptor | None:
        """One node's descriptor as served now, or None for an unknown type."""
        entry = self.registry.lookup(node_type)
        if entry is None:
            return None
        return serve_descriptor(
            entry.descriptor, self.registry.node_manifest(node_type), self.catalogs
        )

    def registry_version(self) -> str:
        """Changes whenever the served descriptors could: nodes, packs or installed models."""
        h = hashlib.sha256(f"{self.registry.version}|{self.catalogs.fingerprint()}".encode())
        return "r_" + h.hexdigest()[:8]

    # runs -------------------------------------------------------------------------------------
    def prepare(self, request: Any) -> Plan:
        """Parse, validate and plan a run request; raises the kernel's typed errors."""
        graph, target = parse_request(request)
        return plan(graph, target, self.registry, fingerprint=self._fingerprint)

    async def run(self, request: Any, listener: RunListener | None = None) -> RunResult:
        """Run a request to completion; the target's outputs stay valid while cached."""
        planned = self.prepare(request)
        return await self.run_plan(planned, listener)

    async def run_plan(self, planned: Plan, listener: RunListener | None = None) -> RunResult:
        """Execute an already validated plan."""
        outputs = await execute_plan(planned, self.executor, self.cache, listener or NullListener())
        return RunResult(planned, outputs)

    def read_bytes(self, value: HostValue) -> bytes:
        """The bytes of a media value (copied out of shared memory)."""
        v = value.value
        if not isinstance(v, MediaValue):
            raise InlineHostError(f"not a media value: {type(v).__name__}")
        if isinstance(v.data, InlineBytes):
            return v.data.data
        assert isinstance(v.data, ShmRef)
        return bytes(self._reader.view(v.data))

    def _fingerprint(self, node: GraphNode) -> str | None:
        """Content hashes of files a node's params name by path (so edits invalidate caches)."""
        parts: list[str] = []
        for value in node.params.values():
            if isinstance(value, dict) and value.get("ref") == "path":
                path = value.get("path")
                if isinstance(path, str):
                    parts.append(self._hash_file(path))
        return "|".join(parts) or None

    def _hash_file(self, path: str) -> str:
        try:
            st = os.stat(path)
        except OSError:
            return f"missing:{path}"
        memo = (os.path.realpath(path), st.st_mtime_ns, st.st_size)
        cached = self._file_hashes.get(memo)
        if cached is None:
            h = hashlib.sha256()
            with open(path, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    h.update(chunk)
            cached = self._file_hashes[memo] = h.hexdigest()
        return cached


def _portable_after_death(value: HostValue) -> bool:
    v = value.value
    return isinstance(v, TextValue | JsonValue) or (
        isinstance(v, MediaValue) and isinstance(v.data, InlineBytes)
    )


def media_extension(value: HostValue) -> str:
    """The file extension an output value is written with."""
    v = value.value
    if isinstance(v, MediaValue):
        return v.ext
    if isinstance(v, TextValue):
        return "txt"
    return "json"


def is_handle(kind: str) -> bool:
    """Whether a port kind carries engine handles."""
    return kind in HANDLE_KINDS
