"""The engine: the merged registry, the supervisor, the output cache and the kernel, together."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import msgspec
from inline_core import (
    Executor,
    GraphInvalid,
    GraphNode,
    Issue,
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
from inline_sdk import HANDLE_KINDS, MODEL_ARCHITECTURES, Descriptor
from inline_sdk.protocol import HandleValue, InlineBytes, JsonValue, MediaValue, Stream, TextValue

from .._errors import InlineHostError
from .._settings import Settings
from .._values import HostValue
from ..guard import (
    MAX_PARAMS_BYTES,
    InputPaths,
    OutputTooLarge,
    describe_int,
    held_elsewhere,
    remove_dead_hosts_segments,
    remove_orphan_temps,
    wide_ints,
)
from ..models import ModelCatalogs, budget_of, narrow, serve_descriptor
from ..workers import Broker, SecretsReader, Supervisor, WorkerLauncher
from ._blobs import BlobStore
from ._model_files import ModelStamps, PlanReads, model_files
from ._slots import NodeSlots
from ._store import TakeSource

log = logging.getLogger("inline.engine")


@dataclass(frozen=True, slots=True)
class RunResult:
    """What a finished run produced: the plan and the target node's outputs."""

    plan: Plan
    outputs: dict[str, HostValue]


@dataclass(slots=True)
class _Reload:
    """One registry load, and every caller it answers (those who asked before it started)."""

    covers: int
    stamp: int
    done: anyio.Event = field(default_factory=anyio.Event)
    error: Exception | None = None


class PackExecutor:
    """The kernel's ``Executor``: sends planned nodes to their pack's workers, each call in one
    of its node type's slots (``concurrency`` per replica), earlier runs (lower ``order``)
    first."""

    def __init__(self, supervisor: Supervisor) -> None:
        self.supervisor = supervisor
        self.slots = NodeSlots()
        self._ongoing: dict[str, int] = {}

    def rescale(self, pack: str) -> None:
        """The pack's replica count changed: each of its node types gets ``concurrency`` slots
        per replica now (calls waiting for one go in, earliest run first)."""
        replicas = self.supervisor.replicas(pack)
        for node_type, entry in self.supervisor.registry.entries.items():
            if entry.pack == pack:
                self.slots.resize(node_type, entry.descriptor.concurrency * replicas)

    def ongoing(self, pack: str) -> int:
        """The pack's calls running or waiting for a slot now."""
        return self._ongoing.get(pack, 0)

    async def execute(
        self,
        node: PlannedNode,
        inputs: dict[str, list[Any]],
        report: Any,
        *,
        order: int = 0,
        on_start: Callable[[], None] | None = None,
    ) -> dict[str, Any]:
        wire: dict[str, list[Any]] = {}
        for port, values in inputs.items():
            for hv in values:
                if isinstance(hv.value, HandleValue) and hv.pack != node.pack:
                    raise InlineHostError(
                        f"Cannot pass a {hv.value.kind} handle from pack '{hv.pack}' to node "
                        f"'{node.id}' of pack '{node.pack}'"
                    )
            wire[port] = list(values)

        cap = self.supervisor.settings.max_output_bytes
        streamed: dict[str, int] = {}
        too_large: list[OutputTooLarge] = []
        scope = anyio.CancelScope()

        def on_event(event: Any) -> None:
            if isinstance(event, Stream):
                if too_large:
                    return  # past the cap: nothing more is kept or sent
                size = streamed[event.port] = streamed.get(event.port, 0) + len(event.text)
                if size > cap:  # the cap on outputs holds for what streams too
                    too_large.append(OutputTooLarge(node.id, node.type, event.port, size, cap))
                    scope.cancel()
                    return
            report.progress(node.id, event)

        info = self.supervisor.registry.packs.get(node.pack)
        version = info.version if info is not None else ""
        # each replica of the pack takes the node's ``concurrency`` calls at once
        capacity = node.descriptor.concurrency * self.supervisor.replicas(node.pack)
        self._ongoing[node.pack] = self._ongoing.get(node.pack, 0) + 1
        try:
            async with self.slots.hold(node.type, capacity, order, version):
                if on_start is not None:
                    on_start()
                try:
                    with scope:
                        outputs = await self.supervisor.call(
                            node.pack, node.type, node.id, node.params, wire, on_event
                        )
                except Exception:
                    if too_large:  # the call ended because it streamed too much: say that
                        raise too_large[0] from None
                    raise
                if too_large:
                    raise too_large[0]
                return outputs
        finally:
            self._ongoing[node.pack] -= 1


class Engine:
    """Validates, plans and runs graphs through pack workers."""

    def __init__(
        self,
        settings: Settings,
        registry: MergedRegistry,
        tg: anyio.abc.TaskGroup,
        *,
        secrets: SecretsReader | None = None,
        launcher: WorkerLauncher | None = None,
    ) -> None:
        """An engine whose supervisor's tasks live in ``tg``; ``secrets`` reads the secrets a
        call asks for (none reach a worker without it); ``launcher`` overrides the settings'."""
        self.settings = settings
        self.registry = registry
        broker = Broker(
            profile=settings.profile,
            budget=budget_of(settings),
            parallel=settings.parallel,
            parallel_device=settings.parallel_device,
        )
        self.supervisor = Supervisor(
            registry,
            settings,
            tg,
            broker=broker,
            secrets=secrets,
            on_worker_exit=self._worker_gone,
            on_resize=lambda pack: self.executor.rescale(pack),
            launcher=launcher,
        )
        self.cache = OutputCache(
            max_entries=settings.cache_entries, on_evict=lambda _k, outs: self._evicted(outs)
        )
        self.blobs = BlobStore(settings.blobs_dir)
        self.executor = PackExecutor(self.supervisor)
        self.catalogs = ModelCatalogs(settings.models_roots)
        self.bulk = self.supervisor.bulk
        self.inputs = InputPaths(settings.input_roots, settings.cwd, settings.max_upload_bytes)
        #: The model files a node loads enter its cache key by a stamp of their content.
        self.model_stamps = ModelStamps()
        self._lock_path = str(settings.data_dir / "packs.lock")
        self._seen_lock = self._lock_stamp()
        self.plan_reads = PlanReads()
        # reload_registry's single flight: callers so far, and the load running
        self._reloads_asked = 0
        self._reloading: _Reload | None = None

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        settings: Settings,
        *,
        say: Callable[[str], None] | None = None,
        secrets: SecretsReader | None = None,
    ) -> AsyncIterator[Engine]:
        """Load the registry (building pack venvs on first use) and run the engine's tasks;
        ``secrets`` reads the secrets a node's call asks for (the top wires the hub's store)."""
        for d in (settings.data_dir, settings.models_dir, settings.blobs_dir):
            d.mkdir(parents=True, exist_ok=True)
        ModelCatalogs(settings.models_roots).ensure_folders()
        remove_dead_hosts_segments()  # a host that was kill -9'd left its shared memory
        if not held_elsewhere(settings.data_dir):  # a serving host's temps are in progress
            remove_orphan_temps(settings.blobs_dir, settings.data_dir / "takes")
            # the sandboxed packs' views of the assets: made anew as calls name assets
            shutil.rmtree(settings.data_dir / "assets-view", ignore_errors=True)
        registry = await anyio.to_thread.run_sync(
            lambda: load_registry(settings.packs_dir, settings.extra_packs, say=say)
        )
        try:
            async with anyio.create_task_group() as tg:
                engine = cls(settings, registry, tg, secrets=secrets)
                try:
                    await anyio.to_thread.run_sync(engine.blobs.make_folders)
                    yield engine
                finally:
                    await engine.supervisor.aclose()
                    tg.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # The engine's own tasks never fail; what arrives here is the caller's exception.
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from group.exceptions[0].__cause__
            raise

    # cache hygiene -------------------------------------------------------------------------------
    def _evicted(self, outputs: dict[str, Any]) -> None:
        for v in outputs.values():
            if isinstance(v, HostValue) and v.pack == "host" and isinstance(v.value, MediaValue):
                self.bulk.free(v.value)
        values = [v for v in outputs.values() if isinstance(v, HostValue) and v.pack != "host"]
        self.supervisor.release_soon(values)

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

    # packs ------------------------------------------------------------------------------------
    def _lock_stamp(self) -> int:
        try:
            return os.stat(self._lock_path).st_mtime_ns
        except OSError:
            return 0

    async def refresh(self) -> bool:
        """Reload the registry if ``packs.lock`` changed (a venv built on first use, an install
        from the CLI while the server runs); True when it did. Never raises: a reload that
        fails keeps the registry as it was (and is logged), so no submit fails for it."""
        stamp = self._lock_stamp()
        if stamp == self._seen_lock:
            return False
        flight = self._reloading
        if flight is not None and flight.stamp == stamp:  # a load of this very change runs
            await flight.done.wait()
            return flight.error is None
        try:
            await self.reload_registry()
        except Exception:
            log.exception("reloading the packs after packs.lock changed failed; kept the old")
            self._seen_lock = stamp  # tried for this change: the next change tries again
            return False
        return True

    async def reload_registry(self) -> MergedRegistry:
        """Load the packs again (after an install, upgrade, rollback, remove or node switch).

        Single-flight: however many callers ask at once, one load runs at a time, and every
        caller gets the result of a load that started after it asked (a caller arriving while
        one runs waits for the next). Calls in flight finish on the version they started on;
        new calls use the new one.
        """
        self._reloads_asked += 1
        ticket = self._reloads_asked
        while True:
            flight = self._reloading
            if flight is None:
                break
            await flight.done.wait()
            if flight.covers >= ticket:  # it started after this caller asked
                if flight.error is not None:
                    raise flight.error
                return self.registry
        # the stamp before reading: a change made during the load is loaded again later
        stamp = self._lock_stamp()
        flight = self._reloading = _Reload(covers=self._reloads_asked, stamp=stamp)
        try:
            registry = await anyio.to_thread.run_sync(
                lambda: load_registry(self.settings.packs_dir, self.settings.extra_packs)
            )
        except Exception as exc:
            flight.error = exc
            raise
        else:
            self.registry = registry
            self.supervisor.set_registry(registry)
            self._seen_lock = stamp
        finally:
            self._reloading = None
            flight.done.set()
        return registry

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
    def reads_files(self, request: Any) -> bool:
        """Whether planning ``request`` may read files or take long (see ``PlanReads``): then
        it is planned in a worker thread, any other plan on the event loop."""
        return self.plan_reads.check(self.registry, self.inputs, request)

    def prepare(self, request: Any) -> Plan:
        """Parse, validate and plan a run request; raises the kernel's typed errors (params a
        call could not carry to its worker are refused here, not when the node runs)."""
        graph, target = parse_request(request)
        planned = plan(graph, target, self.registry, fingerprint=self._fingerprint)
        issues = [i for n in graph.nodes if n.id in planned for i in _wire_issues(n)]
        if not issues:
            issues = [i for n in graph.nodes if n.id in planned for i in self._model_issues(n)]
        if issues:
            raise GraphInvalid(issues)
        return planned

    def _model_issues(self, node: GraphNode) -> list[Issue]:
        """The model folders ``node`` picks by name that are not installed: found at submit,
        before its pack's venv is built or a worker starts. Only the catalogs a node loads a
        folder of by its name alone (``MODEL_ARCHITECTURES``: llm, embeddings) are checked
        here; a node that falls back to other files when its pick is missing says so itself."""
        entry = self.registry.lookup(node.type)
        if entry is None:
            return []
        issues = []
        for param in entry.descriptor.params:
            category = param.options_from
            if category not in MODEL_ARCHITECTURES:
                continue
            value = node.params.get(param.key, param.default)
            if not isinstance(value, str) or any(o.value == value for o in param.options):
                continue
            if value and self.catalogs.has(category, value):
                continue
            if not value:  # the first folder of the architecture the param declares
                arch = entry.descriptor.architecture(param.key)
                if narrow(category, arch, self.catalogs.entries(category), self.catalogs):
                    continue
            issues.append(_missing_model(node, param.key, category, value, self.catalogs))
        return issues

    async def run(self, request: Any, listener: RunListener | None = None) -> RunResult:
        """Run a request to completion; the target's outputs stay valid while cached."""
        planned = self.prepare(request)
        return await self.run_plan(planned, listener)

    async def run_plan(
        self,
        planned: Plan,
        listener: RunListener | None = None,
        *,
        executor: Executor | None = None,
    ) -> RunResult:
        """Execute an already validated plan (through ``executor``, default the workers)."""
        outputs = await execute_plan(
            planned,
            executor or self.executor,
            self.cache,
            listener or NullListener(),
            sibling_grace=self.settings.sibling_grace,
        )
        return RunResult(planned, outputs)

    def restore_stored(self, planned: Plan, store: TakeSource) -> int:
        """Put outputs stored as takes back into the cache, from the target upstream, stopping
        at what is restored (nothing upstream of it needs to run); the number restored."""
        restored, todo, seen = 0, [planned.target], set()
        while todo:
            node = planned.node(todo.pop())
            if node.id in seen or node.key in self.cache:
                continue
            seen.add(node.id)
            if self._restore(node, store):
                restored += 1
            else:
                todo.extend(node.deps)
        return restored

    def _restore(self, node: PlannedNode, store: TakeSource) -> bool:
        ports = node.descriptor.outputs
        if not ports:
            return False
        takes = {t.port: t for t in store.takes_for_key(node.key)}
        if any(p.id not in takes for p in ports):
            return False
        outputs: dict[str, Any] = {}
        for port in ports:
            take = takes[port.id]
            data = store.take_text(take.hash) if take.kind == "text" else None
            if data is None:  # a media take (or a text one an older host kept as a file)
                try:
                    data = self.blobs.read(take.hash)
                except InlineHostError:
                    return False
            if take.kind == "text":
                value: Any = TextValue(text=data.decode("utf-8", "replace"))
            else:
                value = self.bulk.hold(take.kind, take.ext, data)
            outputs[port.id] = HostValue(value, "host", 0)
        self.cache.put(node.key, outputs)
        return True

    def read_bytes(self, value: HostValue) -> bytes:
        """The bytes of a media or text value (media copied out of shared memory)."""
        v = value.value
        if isinstance(v, TextValue):
            return v.text.encode("utf-8")
        if not isinstance(v, MediaValue):
            raise InlineHostError(f"not a media value: {type(v).__name__}")
        return self.bulk.read(v)

    def _fingerprint(self, node: GraphNode) -> str | None:
        """Content hashes of files a node's params name by path (so edits invalidate caches);
        roots, file type and size are checked before any read (``guard.InputPaths``); and a
        stamp of each model file it loads, so a model replaced under its name renders anew
        while an untouched one is never read again (``_model_files``)."""
        parts = [self.inputs.fingerprint(node) or ""]
        for name, path in model_files(self.registry, node, self.catalogs):
            stamp = "missing" if path is None else self.model_stamps.stamp(path)
            parts.append(f"{name}={stamp}")
        return "|".join(p for p in parts if p) or None


def _missing_model(
    node: GraphNode, key: str, category: str, value: str, catalogs: ModelCatalogs
) -> Issue:
    """The issue of a model folder a node picks that is not installed, with how to get one."""
    where = " or ".join(str(root / category) for root in catalogs.roots)
    fetch = (
        f"inline models import hf:ORG/NAME --as {value}"
        if value
        else "inline models import hf:ORG/NAME"
    )
    what = f"model '{value}' is not in {where}" if value else f"no {category} model is in {where}"
    return Issue(
        code="missing_model",
        message=f"Node '{node.id}': {what}. Fetch one with `{fetch}` (or write tiny demo models "
        "with `inline demo models`).",
        node_id=node.id,
        path=f"$.graph.nodes[{node.index}].params.{key}",
        expected=f"a folder in {category}/",
        got=value,
    )


def _wire_issues(node: GraphNode) -> list[Issue]:
    """What in ``node``'s params the IPC wire cannot carry: integers beyond 64 bits, and params
    larger than a call's frame."""
    where = f"$.graph.nodes[{node.index}].params"
    issues = [
        Issue(
            code="invalid_param",
            message=f"Node '{node.id}': {path.removeprefix(where + '.')} is "
            f"{describe_int(value)}, beyond the 64-bit integers a node call carries.",
            node_id=node.id,
            path=path,
            expected="an integer from -2^63 to 2^63-1",
            got=str(value) if len(str(value)) <= 40 else describe_int(value),
        )
        for path, value in wide_ints(node.params, where)
    ]
    if issues:
        return issues
    size = len(_params_encoder.encode(node.params))
    if size > MAX_PARAMS_BYTES:
        mb = MAX_PARAMS_BYTES / 2**20
        issues.append(
            Issue(
                code="invalid_param",
                message=f"Node '{node.id}': its params are {size / 2**20:.1f} MB, more than the "
                f"{mb:.2f} MB a node call carries; pass large text or data as a file (an asset, "
                'or a {"ref": "path"} input).',
                node_id=node.id,
                path=where,
            )
        )
    return issues


_params_encoder = msgspec.msgpack.Encoder()


def _portable_after_death(value: HostValue) -> bool:
    v = value.value
    return isinstance(v, TextValue | JsonValue) or (
        isinstance(v, MediaValue) and isinstance(v.data, InlineBytes)
    )


def is_handle(kind: str) -> bool:
    """Whether a port kind carries engine handles."""
    return kind in HANDLE_KINDS
