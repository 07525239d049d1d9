"""Deployments: a node's pack kept running on N replicas, or between ``min`` and ``max`` by the
calls it has, stored with the runs (a restarted host brings them back).

A deployment names a node (and, optionally, the model file or folder it serves). Its pack's
pool is sized by it: a fixed count starts every replica at once and replaces one that dies; a
range starts ``min`` and follows the pack's ongoing calls (running or waiting for a slot),
``target_ongoing`` calls a replica, after ``upscale_delay_s`` of wanting more and
``downscale_delay_s`` of wanting fewer, down to none after ``idle_s`` without a call when
``min`` is 0 (the next call starts one). Every decision is one log line, and the latest are in
the deployment's view. Undeploying stops the pack's replicas; its next call starts one, as for
any pack without a deployment.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import msgspec
from inline_core import Estimate, HeaderError, activation_bytes, estimate_paths, place

from ..workers import WorkerProcess, model_files
from ._deployment_views import (
    Autoscaling,
    Decision,
    DeploymentError,
    DeploymentExists,
    DeploymentSpec,
    DeploymentView,
    Live,
    ReplicaView,
    span,
)
from ._deployments_serve import look, serve_one, served_view, warm_params
from ._engine import Engine
from ._store import RunStore, now_ms

log = logging.getLogger("inline.deployments")

NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
#: Seconds between two looks at a deployment's load.
TICK_S = 0.1


class DeploymentService:
    """Deployments over the engine's pools; their task runs in the task group ``start`` gets."""

    def __init__(
        self,
        engine: Engine,
        store: RunStore,
        *,
        requirements: Callable[[Path], Mapping[str, Any]] | None = None,
    ) -> None:
        """``requirements`` reads what a model folder's card says one replica needs (the
        top wires in the hub's reader); without it, Serve replicas ask for the pack's demand."""
        self.engine = engine
        self.store = store
        self._requirements = requirements
        self._live: dict[str, Live] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self._dec = msgspec.json.Decoder(DeploymentSpec)
        self._enc = msgspec.json.Encoder()
        self._some = anyio.Event()
        self._creating = anyio.Lock()

    async def start(self, tg: anyio.abc.TaskGroup) -> int:
        """Bring back the stored deployments and keep them sized; how many came back."""
        self._tg = tg
        for raw in await anyio.to_thread.run_sync(self.store.deployments):
            spec = self._dec.decode(raw)
            if self.engine.registry.lookup(spec.node) is None:
                log.warning("deployment %s: node %s is not served now; kept", spec.name, spec.node)
            self._adopt(spec)
        tg.start_soon(self._keep)
        return len(self._live)

    # asking ------------------------------------------------------------------------------------
    def plan(self, body: dict[str, Any]) -> DeploymentSpec:
        """The deployment ``body`` asks for (``node``, optional ``model``, ``name``, and
        ``replicas`` or ``min``/``max``, with the autoscaling knobs); raises DeploymentError."""
        if not isinstance(body, dict):
            raise DeploymentError('A deployment is a JSON object: {"node": ..., ...}.')
        known = {"node", "model", "name", "replicas", "min", "max", "max_per_node",
                 *Autoscaling.__struct_fields__}  # fmt: skip
        unknown = sorted(set(body) - known)
        if unknown:
            takes = ", ".join(sorted(known))
            raise DeploymentError(
                f"Unknown field(s) {', '.join(unknown)}; a deployment takes {takes}."
            )
        node, model = self._node_and_model(body.get("node"), body.get("model"))
        pack = self.engine.registry.entries[node].pack
        auto = self._auto(pack, model) if body.get("replicas") == "auto" else 1
        low, high = self._range(body, auto)
        scaling = self._autoscaling(body)
        self._check_devices(pack, high)
        others = [s.spec.name for s in self._live.values() if s.spec.pack == pack]
        if others:
            raise DeploymentError(
                f"Pack '{pack}' (of node {node}) is deployed already as '{others[0]}'; its "
                "replicas serve every node of the pack: undeploy it first "
                f"(inline undeploy {others[0]})."
            )
        name = body.get("name") or _default_name(node)
        if not isinstance(name, str) or not NAME.match(name):
            raise DeploymentError(
                f"Name {name!r} is not a deployment name: lowercase letters, digits, '.', '_' "
                "and '-', at most 63, starting with a letter or digit."
            )
        per_node = body.get("max_per_node")
        if per_node is not None and (
            isinstance(per_node, bool) or not isinstance(per_node, int) or per_node < 1
        ):
            raise DeploymentError(f"'max_per_node' is a whole number >= 1, not {per_node!r}.")
        return DeploymentSpec(
            name=name, node=node, pack=pack, model=model, min=low, max=high,
            autoscaling=scaling, created_at=now_ms(), max_per_node=per_node,
        )  # fmt: skip

    async def create(self, body: dict[str, Any]) -> DeploymentView:
        """Store and start the deployment ``body`` asks for; its view (replicas starting)."""
        async with self._creating:  # two asks for one pack at once: the second is refused
            spec = self.plan(body)
            stored = await anyio.to_thread.run_sync(
                self.store.add_deployment, spec.name, self._enc.encode(spec), spec.created_at
            )
            if not stored:
                raise DeploymentExists(f"A deployment named '{spec.name}' exists already.")
            self._adopt(spec)
        log.info(
            "deployed %s: node %s (pack %s), replicas %s",
            spec.name, spec.node, spec.pack, span(spec),
        )  # fmt: skip
        view = self.view(spec.name)
        assert view is not None
        return view

    async def delete(self, name: str) -> bool:
        """Undeploy ``name``: its pack's replicas stop (calls running end first); False if none."""
        live = self._live.pop(name, None)
        if live is None:
            return False
        await anyio.to_thread.run_sync(self.store.drop_deployment, name)
        sup = self.engine.supervisor
        if self._on_serve:
            await sup.undeploy_served(live.spec.pack)
        sup.set_replicas(live.spec.pack, 1)
        sup.retire_all(live.spec.pack)
        log.info("undeployed %s: the replicas of pack %s stop", name, live.spec.pack)
        return True

    def views(self) -> list[DeploymentView]:
        return [v for v in (self.view(n) for n in self._live) if v is not None]

    def view(self, name: str) -> DeploymentView | None:
        live = self._live.get(name)
        if live is None:
            return None
        spec = live.spec
        if self._on_serve:
            return served_view(self.engine, live)
        pool = self.engine.supervisor.pool(spec.pack)
        replicas = [
            ReplicaView(
                pid=w.pid,
                generation=w.generation,
                where=_where(w.describe()),
                state=_state(live, w.generation, busy=bool(w.pending)),
                calls_in_flight=len(w.pending) - (w.generation in live.warming),
                sandboxed=w.sandboxed,
            )
            for w in pool
        ]
        replicas += [
            ReplicaView(pid=None, generation=0, where="", state="starting", calls_in_flight=0)
        ] * live.starting
        ongoing = self.engine.executor.ongoing(spec.pack)
        running = sum(len(w.pending) for w in pool)
        ready = sum(1 for r in replicas if r.state in ("ready", "busy"))
        if live.failure is not None and ready < live.target:
            state = f"failing: {live.failure}"
        elif live.target == 0:
            state = "scaled to zero"
        elif ready >= live.target:
            state = "ready"
        else:
            state = "deploying"
        return DeploymentView(
            name=spec.name, node=spec.node, pack=spec.pack, model=spec.model, min=spec.min,
            max=spec.max, target=live.target, state=state, load=ongoing,
            queue=max(0, ongoing - running), replicas=replicas,
            autoscaling=spec.autoscaling if spec.min != spec.max else None,
            decisions=list(live.decisions), created_at=spec.created_at,
        )  # fmt: skip

    async def until_ready(self, name: str, timeout: float) -> DeploymentView | None:
        """The view once every replica of ``name`` is up and warm (its model loaded), bounded
        by ``timeout``."""
        with anyio.move_on_after(timeout):
            while True:
                view = self.view(name)
                if view is None or view.state == "ready" or view.state.startswith("failing"):
                    return view
                await anyio.sleep(TICK_S)  # the replicas start in the keeper's task
        return self.view(name)

    def _node_and_model(self, node: Any, model: Any) -> tuple[str, str | None]:
        """The node a deployment serves, and its model: ``node`` may name a model a node's
        picker offers instead (the node is then the one that offers it)."""
        if not isinstance(node, str) or not node:
            raise DeploymentError('Say which node to deploy: {"node": "<node type>"}.')
        if model is not None and (not isinstance(model, str) or not model):
            raise DeploymentError("'model' is the name of a model file or folder, if given.")
        if self.engine.registry.lookup(node) is not None:
            if model is not None and not self._offers(node, model):
                raise DeploymentError(f"Node {node} offers no model '{model}'.")
            return node, model
        offering = [  # a hidden node (a helper of the API routes) is never the one meant
            d.type for d in self.engine.descriptors() if not d.hidden and self._offers(d.type, node)
        ]
        if len(offering) == 1 and model is None:
            return offering[0], node
        if len(offering) > 1:
            raise DeploymentError(
                f"Model '{node}' is offered by {len(offering)} nodes ({', '.join(offering)}); "
                'deploy one of them with this model: {"node": ..., "model": ...}.'
            )
        raise DeploymentError(
            f"Unknown node or model '{node}' (inline nodes lists the nodes, inline models the "
            "models)."
        )

    def _check_devices(self, pack: str, replicas: int) -> None:
        """Refuse more replicas than GPUs for a pack whose every replica needs one (its nodes
        load model files, and the machine has GPUs and is not run as ``cpu``)."""
        gpus = len(self.engine.supervisor.broker.inventory.gpus)
        info = self.engine.registry.packs.get(pack)
        if gpus == 0 or info is None or self.engine.settings.profile == "cpu" or self._on_serve:
            return  # (on a cluster, Serve places each replica where a GPU is free)
        if any(n.models for n in info.manifest.nodes.values()) and replicas > gpus:
            raise DeploymentError(
                f"Each replica of pack '{pack}' needs a GPU of its own (its nodes load model "
                f"files) and this machine has {gpus}: ask for at most {gpus} replica(s)."
            )

    def _auto(self, pack: str, model: str | None) -> int:
        """``"auto"`` replicas: one per GPU that holds the model resident (the policy's plan on
        that GPU alone, from the files' headers: the deployment's model, else the files the
        pack's nodes name), one on a machine without GPUs or where no GPU holds it whole."""
        broker = self.engine.supervisor.broker
        inventory, profile = broker.inventory, broker.profile
        if self._on_serve:  # Serve places each replica where a GPU is free
            return max(1, len(inventory.gpus))
        if not inventory.gpus or profile == "cpu":
            return 1
        paths = self._model_paths(pack, model)
        try:
            components = tuple(estimate_paths(paths))
        except (HeaderError, OSError, ValueError):
            components = ()
        if not components:  # nothing to size: a replica per GPU
            return len(inventory.gpus)
        image = any(c.role == "diffusion" for c in components)
        estimate = Estimate(components, activation_bytes(1024, 1024) if image else 0)
        fitting = [
            g for g in inventory.gpus
            if (plan := place(replace(inventory, gpus=(g,)), estimate, profile)).fits
            and all(c.offload == "resident" for c in plan.components)
        ]  # fmt: skip
        if not fitting:
            log.warning("replicas auto: no GPU holds %s whole; one replica", model or pack)
            return 1
        return len(fitting)

    def requirements_of(self, spec: DeploymentSpec) -> Mapping[str, Any]:
        """What the card of the deployment's model folder says one replica needs (``{}``
        without a model, a folder, a card or a reader). Reads files: call it in a thread."""
        if self._requirements is None or spec.model is None:
            return {}
        for path in self._model_paths(spec.pack, spec.model):
            if path.is_dir() and (found := self._requirements(path)):
                return found
        return {}

    def _model_paths(self, pack: str, model: str | None) -> list[Path]:
        """The files a replica of ``pack`` loads: ``model`` (a file or folder of a models dir's
        category), else those its nodes name."""
        settings = self.engine.settings
        if model is None:
            return model_files(self.engine.registry, settings, pack)[1]
        for root in settings.models_roots:
            for category in sorted(root.iterdir()) if root.is_dir() else ():
                if (category / model).exists():
                    return [category / model]
        return []

    def _offers(self, node: str, model: str) -> bool:
        descriptor = self.engine.descriptor(node)
        if descriptor is None:
            return False
        return any(
            p.options_from and any(o.value == model for o in p.options) for p in descriptor.params
        )

    @staticmethod
    def _range(body: dict[str, Any], gpus: int = 1) -> tuple[int, int]:
        """(min, max) from ``replicas`` (a count, or ``"auto"``: ``gpus``) or ``min``/``max``."""

        def count(key: str, least: int) -> int | None:
            value = body.get(key)
            if value is None:
                return None
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                also = ' or "auto" (one per GPU)' if key == "replicas" else ""
                raise DeploymentError(f"'{key}' is a whole number >= {least}{also}, not {value!r}.")
            return value

        replicas = gpus if body.get("replicas") == "auto" else count("replicas", 1)
        low, high = count("min", 0), count("max", 1)
        if replicas is not None:
            if low is not None or high is not None:
                raise DeploymentError("Give 'replicas', or 'min' and 'max', not both.")
            return replicas, replicas
        if low is None and high is None:
            return 1, 1
        low = 1 if low is None else low
        high = max(low, 1) if high is None else high
        if low > high:
            raise DeploymentError(f"'min' ({low}) is more than 'max' ({high}).")
        return low, high

    @staticmethod
    def _autoscaling(body: dict[str, Any]) -> Autoscaling:
        knobs: dict[str, float] = {}
        for key in Autoscaling.__struct_fields__:
            value = body.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise DeploymentError(f"'{key}' is a number >= 0, not {value!r}.")
            knobs[key] = float(value)
        if knobs.get("target_ongoing") == 0:
            raise DeploymentError("'target_ongoing' is the calls one replica takes: more than 0.")
        return Autoscaling(**knobs)

    # keeping -----------------------------------------------------------------------------------
    @property
    def _on_serve(self) -> bool:
        """Whether deployments run on Ray Serve (``INLINE_RAY_ADDRESS`` is set)."""
        return bool(self.engine.settings.ray_address)

    def _adopt(self, spec: DeploymentSpec) -> None:
        live = self._live[spec.name] = Live(spec)
        self._some.set()
        if self._on_serve:  # Serve starts, scales and routes; the host slots its calls
            self.engine.supervisor.set_replicas(spec.pack, max(1, spec.max))
            live.starting = spec.min
            if self._tg is not None:
                self._tg.start_soon(
                    serve_one, self.engine, live, lambda: self._live.get(spec.name) is live,
                    lambda: self.requirements_of(spec),
                )  # fmt: skip
            return
        self.engine.supervisor.set_replicas(spec.pack, max(1, live.target), keep=live.target)

    async def _keep(self) -> None:
        """Size every deployment, for as long as the service runs."""
        while True:
            if not self._live:  # nothing to keep: sleep until a deployment comes
                self._some = anyio.Event()
                await self._some.wait()
            for live in list(self._live.values()):
                if self._on_serve:
                    await look(self.engine, live)
                    continue
                self._scale(live)
                self._fill(live)
            await anyio.sleep(TICK_S)

    def _scale(self, live: Live) -> None:
        spec = live.spec
        if spec.min == spec.max:
            return
        now = time.monotonic()
        ongoing = self.engine.executor.ongoing(spec.pack)
        if ongoing:
            live.last_call = now
        scaling = spec.autoscaling
        if ongoing:
            wanted = math.ceil(ongoing / scaling.target_ongoing)
        elif live.target == 0 or (spec.min == 0 and now - live.last_call >= scaling.idle_s):
            wanted = 0  # none until a call comes (one warm replica until ``idle_s``)
        else:
            wanted = max(spec.min, 1)
        wanted = min(spec.max, max(spec.min, wanted))
        if wanted > live.target:
            live.want_fewer_since = None
            live.want_more_since = live.want_more_since or now
            if live.target == 0 or now - live.want_more_since >= scaling.upscale_delay_s:
                self._decide(live, wanted, f"{ongoing} ongoing call(s)")
        elif wanted < live.target:
            live.want_more_since = None
            live.want_fewer_since = live.want_fewer_since or now
            if now - live.want_fewer_since >= scaling.downscale_delay_s or wanted == 0:
                idle = f"idle {scaling.idle_s:g} s" if wanted == 0 else f"{ongoing} ongoing"
                self._decide(live, wanted, idle)
        else:
            live.want_more_since = live.want_fewer_since = None

    def _decide(self, live: Live, to: int, reason: str) -> None:
        spec, was = live.spec, live.target
        live.target = to
        live.want_more_since = live.want_fewer_since = None
        live.decisions.append(
            Decision(at=now_ms(), replicas_from=was, replicas_to=to, reason=reason)
        )
        log.info(
            "deployment %s: %d -> %d replica(s) (%s; target %g ongoing per replica)",
            spec.name, was, to, reason, spec.autoscaling.target_ongoing,
        )  # fmt: skip
        sup = self.engine.supervisor
        sup.set_replicas(spec.pack, max(1, to), keep=to)
        if to == 0:
            sup.retire_all(spec.pack)

    def _fill(self, live: Live) -> None:
        """Start the replicas the deployment's size asks for and its pool lacks."""
        missing = live.target - len(self.engine.supervisor.pool(live.spec.pack)) - live.starting
        for _ in range(max(0, missing)):
            if self._tg is None:
                return
            live.starting += 1
            self._tg.start_soon(self._start_one, live)

    async def _start_one(self, live: Live) -> None:
        try:
            proc = await self.engine.supervisor.add_replica(live.spec.pack)
            live.failure = None
            if proc.generation not in live.warmed:
                live.warming.add(proc.generation)  # (before it stops counting as starting)
        except Exception as exc:  # the pack cannot start: said in the view, tried again later
            if live.failure is None:
                log.warning("deployment %s: a replica failed to start: %s", live.spec.name, exc)
            live.failure = _first_line(exc)
            await anyio.sleep(1.0)  # not a hot loop of failing starts
            return
        finally:
            live.starting -= 1
        if proc.generation in live.warming:
            await self._warm(live, proc)

    async def _warm(self, live: Live, proc: WorkerProcess) -> None:
        """Load the deployment's model in the new replica ``proc`` (its node's warm hook), so
        that its first call finds it loaded; a replica that cannot is said in the view."""
        spec, gen = live.spec, proc.generation
        started = time.monotonic()
        try:
            params = warm_params(self.engine, spec)
            hooked = await proc.warm(spec.node, params, self.engine.settings.call_timeout)
        except Exception as exc:  # the model cannot load: the replica serves on, cold
            reason = _first_line(exc)
            live.cold[gen] = reason
            live.failure = f"replica {gen} could not load {spec.model or spec.node}: {reason}"
            log.warning("deployment %s: %s", spec.name, live.failure)
        else:
            live.warmed.add(gen)
            if hooked:
                log.info(
                    "deployment %s: replica %d warm (%s, %.1f s)",
                    spec.name, gen, spec.model or spec.node, time.monotonic() - started,
                )  # fmt: skip
        finally:
            live.warming.discard(gen)


def _state(live: Live, generation: int, *, busy: bool) -> str:
    """A local replica's state: warming (loading the model), cold (could not), busy, ready."""
    if generation in live.warming:
        return "warming"
    if generation in live.cold:
        return f"cold: {live.cold[generation]}"
    return "busy" if busy else "ready"


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _where(described: dict[str, Any]) -> str:
    where = str(described.get("node") or described.get("launcher") or "local")
    gpu = described.get("gpu")
    return where if gpu is None else f"{where}, GPU {gpu}"


def _default_name(node: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", node.lower()).strip("-")[:63] or "deployment"
