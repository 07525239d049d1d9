"""Deployments on Ray Serve (``INLINE_RAY_ADDRESS`` set): the host's side.

A deployment of a pack is one Serve application (``inline-<name>``) of one deployment whose
replicas are ``PackReplica`` (``_serve_replica``), each with the resources the pack's demand
asks for (``_ray_placement``: GPUs and memory from the estimate, ``INLINE_RAY_RESOURCES``).
Serve places them, scales them (``autoscaling_config`` from the deployment's range and knobs)
and routes each call (model affinity through its multiplexed model id); the host is the only
front door, so Serve runs no HTTP proxy. A call is one streaming response of the handle: its
events as they come, then its outputs, their bytes inline (through Ray's object store). A cancel
or a timeout cancels the response, which cancels the call in its replica. A replica that dies
fails only its own calls (``PackCrashed`` naming its node); Serve starts another.

Serve's controller outlives the host's driver, so a deployment keeps serving across a host
restart; the restarted host runs it again with the same arguments (Serve keeps what is unchanged).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import msgspec
from inline_registry import RegistryError, recipe_for
from inline_sdk.protocol import (
    CallCancelled,
    Failed,
    HandleValue,
    InlineBytes,
    MediaValue,
    Preview,
    Progress,
    Stream,
    Value,
)

from .._errors import CallCancelled as CallCancelledError
from .._errors import CallTimedOut, HandlesGone, NodeError, PackCrashed, PackStartFailed
from .._settings import Settings
from .._values import EventCallback, HostValue
from ._bulk import HostBulk
from ._launcher import LaunchFailed
from ._process import SecretsReader
from ._ray_models import NAMESPACE, ModelSource, model_manifest, source_name
from ._ray_placement import Demand, with_requirements
from ._sandbox import node_knobs
from ._serve_replica import (
    HANDLES,
    PackReplica,
    ServeCall,
    ServeCrashed,
    ServeDone,
    ServeEvent,
    ServeRefused,
)

log = logging.getLogger("inline.deployments")
#: Seconds between two looks at where a deployment's replicas run.
LOOK_S = 1.0
#: The waits before sending again a call that reached a replica without its handles.
REFUSED_RETRIES = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 0.0)
_encode = msgspec.msgpack.Encoder().encode
_events = msgspec.msgpack.Decoder(ServeEvent)


def app_name(name: str) -> str:
    """The Serve application of deployment ``name``."""
    return f"inline-{name}"


@dataclass(slots=True)
class ServeReplica:
    """A replica as Serve's state shows it."""

    tag: str
    node: str
    pid: int | None
    state: str


@dataclass(slots=True)
class ServedPack:
    """One pack deployed on Serve, and its handle (None until Serve says it runs)."""

    name: str
    pack: str
    model: str | None
    handle: Any = None
    failure: str | None = None
    replicas: list[ServeReplica] = field(default_factory=list)
    looked: float = 0.0
    #: Replica tags by the (negative) generation their handles carry on the host.
    tags: dict[int, str] = field(default_factory=dict)
    #: Whether each replica's worker is sandboxed on its node, by tag (as its calls said).
    sandboxed: dict[str, bool] = field(default_factory=dict)
    ready: anyio.Event = field(default_factory=anyio.Event)
    #: What each replica asked Ray for (the pack's demand, or the model card's requirements).
    demand: Demand | None = None

    def generation(self, tag: str) -> int:
        for gen, known in self.tags.items():
            if known == tag:
                return gen
        gen = -(len(self.tags) + 1)
        self.tags[gen] = tag
        return gen


class ServeDeployments:
    """The host's Serve applications, one per deployed pack."""

    def __init__(
        self,
        settings: Settings,
        join: Callable[[], Awaitable[Any]],
        demand: Callable[[str, float], Demand],
        bulk: HostBulk,
        secrets: SecretsReader | None,
        trust: Callable[[str], tuple[bool, bool]] = lambda _pack: (False, False),
    ) -> None:
        self.settings = settings
        self._trust = trust
        self._join = join
        self._demand = demand
        self.bulk = bulk
        self._secrets = secrets
        self.served: dict[str, ServedPack] = {}
        self._ids = itertools.count(1)
        #: The host's ``ModelSource`` actor, held for the host's life (a named actor no handle
        #: holds is gone).
        self._source: Any = None

    async def deploy(
        self,
        name: str,
        pack: str,
        python: Path,
        *,
        low: int,
        high: int,
        scaling: dict[str, float],
        concurrency: int,
        model: str | None,
        per_node: int | None = None,
        warm: dict[str, Any] | None = None,
        requirements: Mapping[str, Any] | None = None,
    ) -> ServedPack:
        """Run (or update) the Serve application of ``pack``; returns once Serve placed it
        (its replicas started) or failed to."""
        served = self.served.get(pack) or ServedPack(name, pack, model)
        self.served[pack] = served
        if served.ready.is_set() and served.handle is None:
            served.ready = anyio.Event()  # a retry after a failure: calls wait for it
        try:
            ray = await self._join()
            recipe = await anyio.to_thread.run_sync(recipe_for, python)
        except (RegistryError, OSError, LaunchFailed) as exc:
            served.failure = str(exc)
            served.ready.set()
            raise PackStartFailed(pack, f"cannot deploy it on the cluster: {exc}") from None
        gpus = float(ray.cluster_resources().get("GPU", 0))
        demand = self._demand(pack, gpus)
        if requirements:  # the deployed model's card says what a replica needs
            demand = with_requirements(demand, requirements)
        served.demand = demand
        encoded = msgspec.msgpack.encode(recipe)
        knobs = {  # the host's paths and sandbox (node_knobs), and the call knobs
            **node_knobs(self.settings, self._trust(pack)),
            "cancel_grace": self.settings.cancel_grace,
            "max_output_bytes": self.settings.max_output_bytes,
            "profile": self.settings.profile,
            "start_timeout": self.settings.start_timeout,
            # what each replica loads before it counts as started (the deployment's model)
            "warm": warm,
            "warm_timeout": self.settings.call_timeout,
        }
        if model is not None:  # what a replica's node lacks of it, it fetches from here
            try:
                knobs["fetch"] = await self._offer_model(ray, pack, model)
            except PackStartFailed as exc:
                served.failure = exc.reason
                served.ready.set()
                raise
        packs_dir = str(self.settings.ray_packs_dir or self.settings.packs_dir)
        options = _options(demand, low, high, scaling, concurrency)
        if per_node is not None:
            options["max_replicas_per_node"] = per_node
        try:
            served.handle = await anyio.to_thread.run_sync(
                _run_app, name, options, encoded, packs_dir, knobs
            )
        except Exception as exc:  # Serve's words: the replicas could not start
            served.failure = _reason(exc)
            served.ready.set()
            raise PackStartFailed(pack, f"its Serve deployment failed: {served.failure}") from None
        served.failure = None
        served.ready.set()
        return served

    async def _offer_model(self, ray: Any, pack: str, model: str) -> dict[str, Any] | None:
        """Let the cluster's nodes fetch ``model`` from this host (its files, sizes and hashes
        for the replicas, served by the host's ``ModelSource``); None when no models dir here
        has it (the node's own copy, if any, is then what loads)."""
        roots = self.settings.models_roots
        entries = await anyio.to_thread.run_sync(model_manifest, roots, model)
        if not entries:
            return None
        name = source_name(self.settings.data_dir)

        def offer() -> None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            if self._source is None:
                here = ray.get_runtime_context().get_node_id()  # the host's own node
                self._source = (
                    ray.remote(ModelSource)
                    .options(
                        name=name,
                        namespace=NAMESPACE,
                        get_if_exists=True,
                        num_cpus=0,
                        scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False),
                    )
                    .remote()
                )
            ray.get(self._source.allow.remote([str(r) for r in roots], entries))

        try:
            await anyio.to_thread.run_sync(offer)
        except Exception as exc:  # Ray's words: the nodes could not be offered the model
            raise PackStartFailed(
                pack, f"cannot offer model {model} to the cluster's nodes: {_reason(exc)}"
            ) from None
        size = sum(e[1] for e in entries)
        log.info("model %s (%d file(s), %d bytes) offered to the cluster's nodes", model,
                 len(entries), size)  # fmt: skip
        return {"source": name, "files": entries}

    async def undeploy(self, pack: str) -> None:
        """Delete the pack's Serve application (its replicas stop, their devices are free)."""
        served = self.served.pop(pack, None)
        if served is None:
            return
        await _let_go(served)
        await self._join()
        await anyio.to_thread.run_sync(_delete_app, served.name)

    async def aclose(self) -> None:
        """Let go of the Serve handles (the applications keep running): their routers stop,
        which would otherwise go on pushing metrics from this process after it left Ray."""
        for served in self.served.values():
            await _let_go(served)

    async def look(self, served: ServedPack) -> list[ServeReplica]:
        """Where the replicas run now (Ray's state API; looked up at most every ``LOOK_S``)."""
        if time.monotonic() - served.looked >= LOOK_S:
            served.looked = time.monotonic()
            with contextlib.suppress(Exception):  # no state API (no dashboard): say nothing
                served.replicas = await anyio.to_thread.run_sync(_replicas, served.name)
        return served.replicas

    # calls -------------------------------------------------------------------------------------
    async def call(
        self,
        served: ServedPack,
        node_type: str,
        node_id: str,
        params: dict[str, Any],
        inputs: dict[str, list[HostValue]],
        on_event: EventCallback | None,
        timeout: float,
        wants: frozenset[str],
    ) -> dict[str, HostValue]:
        """Run one node call in a replica Serve picks (the one holding its handles or its
        model, where there is one)."""
        pack = served.pack
        if served.handle is None:
            await served.ready.wait()
            if served.handle is None:
                raise PackStartFailed(pack, served.failure or "its Serve deployment is not running")
        wire, owner = self._wire(served, inputs)
        request = ServeCall(
            node=node_type,
            node_id=node_id,
            params=params,
            inputs=wire,
            secrets=self._secrets(params, node_type, pack) if self._secrets is not None else {},
            timeout=timeout,
            handles_of=owner,
        )
        model = HANDLES + owner if owner else (min(wants) if wants else served.model or "")
        encoded = _encode(request)
        # Serve's router learns which replica holds a handle id a moment after it is made: a
        # call that reached another replica is sent again (a few times), then its producers
        # run again (HandlesGone)
        for wait in REFUSED_RETRIES:
            outputs = await self._once(
                served, encoded, model, node_type, node_id, on_event, timeout
            )
            if outputs is not None:
                return outputs
            await anyio.sleep(wait)
        held = [
            (port, i)
            for port, hvs in inputs.items()
            for i, hv in enumerate(hvs)
            if isinstance(hv.value, HandleValue)
        ]
        raise HandlesGone(pack, next(iter(served.tags), 0), held)

    async def _once(
        self,
        served: ServedPack,
        request: bytes,
        model: str,
        node_type: str,
        node_id: str,
        on_event: EventCallback | None,
        timeout: float,
    ) -> dict[str, HostValue] | None:
        """One try of a call: its outputs, or None where the replica held not its handles."""
        from ray.exceptions import RayError

        pack = served.pack
        response = served.handle.options(stream=True, multiplexed_model_id=model).call.remote(
            request
        )
        try:
            with anyio.fail_after(timeout + self.settings.cancel_grace):
                async for item in response:
                    event = _events.decode(item)
                    match event:
                        case Progress() | Preview() | Stream():
                            if on_event is not None:
                                on_event(event)  # previews travel inline
                        case ServeDone():
                            return self._outputs(served, event)
                        case Failed(error=error):
                            raise NodeError(pack, node_type, node_id, error)
                        case CallCancelled():
                            raise CallCancelledError(f"'{node_type}' was cancelled")
                        case ServeCrashed(returncode=code, tail=tail):
                            raise PackCrashed(pack, code, tail, f"'{node_type}'")
                        case ServeRefused():
                            return None
        except TimeoutError:
            response.cancel()
            raise CallTimedOut(pack, node_type, timeout, stopped=False) from None
        except RayError as exc:  # its replica died (or its node did)
            raise PackCrashed(pack, None, f"ray: {_reason(exc)}", f"'{node_type}'") from None
        except BaseException:
            response.cancel()  # cancelled (or failed here): so is the call in its replica
            raise
        raise PackCrashed(pack, None, "its Serve response ended without outputs", node_type)

    def _wire(
        self, served: ServedPack, inputs: dict[str, list[HostValue]]
    ) -> tuple[dict[str, list[Value]], str]:
        """The inputs with their bytes inline, and the replica whose handles they take."""
        owner = ""
        wire: dict[str, list[Value]] = {}
        for port, hvs in inputs.items():
            values: list[Value] = []
            for i, hv in enumerate(hvs):
                v = hv.value
                if isinstance(v, HandleValue):
                    tag = served.tags.get(hv.generation, "") if hv.pack == served.pack else ""
                    if not tag or (owner and tag != owner):
                        raise HandlesGone(served.pack, hv.generation, [(port, i)])
                    owner = tag
                elif isinstance(v, MediaValue) and not isinstance(v.data, InlineBytes):
                    v = MediaValue(
                        kind=v.kind, ext=v.ext, data=InlineBytes(self.bulk.read(v)), params=v.params
                    )
                values.append(v)
            wire[port] = values
        return wire, owner

    def _outputs(self, served: ServedPack, done: ServeDone) -> dict[str, HostValue]:
        served.sandboxed[done.replica] = done.sandboxed
        gen = served.generation(done.replica)
        out: dict[str, HostValue] = {}
        for port, v in done.outputs.items():
            if isinstance(v, MediaValue) and isinstance(v.data, InlineBytes):
                held = self.bulk.hold(v.kind, v.ext, v.data.data, v.params)
                out[port] = HostValue(held, "host", 0)
            else:
                out[port] = HostValue(v, served.pack, gen)
        return out

    async def release(self, served: ServedPack, generation: int, ids: list[int]) -> None:
        """Free handles a replica made (routed to it by their id; dropped if it is gone)."""
        tag = served.tags.get(generation)
        if tag is None or served.handle is None:
            return
        with contextlib.suppress(Exception):
            handle = served.handle.options(multiplexed_model_id=HANDLES + tag)
            await handle.release.remote(tag, ids)


def _options(
    demand: Demand, low: int, high: int, scaling: dict[str, float], concurrency: int
) -> dict[str, Any]:
    """``serve.deployment`` options of a deployment of ``low``..``high`` replicas."""
    actor = demand.options()
    options: dict[str, Any] = {
        "ray_actor_options": actor,
        "max_ongoing_requests": max(1, concurrency),
        "health_check_period_s": 2.0,
        "graceful_shutdown_timeout_s": 10.0,
    }
    if low == high:
        options["num_replicas"] = low
    else:
        options["autoscaling_config"] = {
            "min_replicas": low,
            "max_replicas": high,
            "initial_replicas": low,
            "target_ongoing_requests": scaling.get("target_ongoing", 1.0),
            "upscale_delay_s": scaling.get("upscale_delay_s", 0.0),
            "downscale_delay_s": scaling.get("downscale_delay_s", 30.0),
            "downscale_to_zero_delay_s": scaling.get("idle_s", 300.0),
            "metrics_interval_s": 0.5,
            "look_back_period_s": 2.0,
        }
    return options


def _run_app(
    name: str,
    options: dict[str, Any],
    recipe: bytes,
    packs_dir: str,
    knobs: dict[str, Any],
) -> Any:
    """Start Serve (no HTTP proxy: handles only) and run the application; its handle."""
    from ray import serve

    serve.start(proxy_location="Disabled")
    deployment = serve.deployment(PackReplica, name="PackReplica", **options)
    return serve.run(
        deployment.bind(recipe, packs_dir, knobs), name=app_name(name), route_prefix=None
    )


def _delete_app(name: str) -> None:
    from ray import serve

    serve.delete(app_name(name), _blocking=True)


def _replicas(name: str) -> list[ServeReplica]:
    """The live replicas of deployment ``name`` and their nodes (Ray's state API)."""
    import ray
    from ray.util.state import list_actors

    nodes = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
    class_name = f"ServeReplica:{app_name(name)}:PackReplica"
    found: list[Any] = list_actors(filters=[("class_name", "=", class_name)], limit=1000)
    return [
        ServeReplica(
            tag=(a.name or "").rpartition("#")[2],
            node=nodes.get(a.node_id or "", a.node_id or ""),
            pid=a.pid,
            state="ready" if a.state == "ALIVE" else a.state.lower(),
        )
        for a in found
        if a.state in ("ALIVE", "PENDING_CREATION", "DEPENDENCIES_UNREADY", "RESTARTING")
    ]


async def _let_go(served: ServedPack) -> None:
    """Shut this process's handle of ``served`` down (its router, and the metrics it pushes
    to Serve's controller every few seconds); the application runs on."""
    handle, served.handle = served.handle, None
    if handle is not None:
        with contextlib.suppress(Exception):
            await handle.shutdown_async()


def _reason(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return " ".join(lines[:4])[:400] or type(exc).__name__
