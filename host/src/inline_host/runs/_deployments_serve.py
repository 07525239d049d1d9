"""Deployments on Ray Serve: the service's side (the supervisor's is ``workers._serve``).

Serve starts, scales and routes the replicas; the service deploys each one (again after a
failure), looks once a second at where its replicas run (a change of their count is logged and
kept as a decision) and shows them in the deployment's view.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import msgspec

from ._deployment_views import (
    Decision,
    DeploymentError,
    DeploymentSpec,
    DeploymentView,
    Live,
    ReplicaView,
    span,
)
from ._engine import Engine
from ._store import now_ms

log = logging.getLogger("inline.deployments")


def warm_params(engine: Engine, spec: DeploymentSpec) -> dict[str, Any]:
    """The node's params that pick the deployment's model, which each new replica loads
    before it counts as ready (none without a model)."""
    if spec.model is None:
        return {}
    descriptor = engine.descriptor(spec.node)
    for p in descriptor.params if descriptor is not None else ():
        if p.options_from and any(o.value == spec.model for o in p.options):
            return {p.key: spec.model}
    raise DeploymentError(f"node {spec.node} offers no model '{spec.model}' now")


async def serve_one(
    engine: Engine,
    live: Live,
    current: Callable[[], bool],
    requirements: Callable[[], Mapping[str, Any]] | None = None,
) -> None:
    """Deploy ``live`` on Serve (again after a failure, every few seconds, while ``current``
    says it is deployed); each replica asks Ray for what ``requirements`` (the model card's,
    read in a thread) says, where it says anything."""
    spec = live.spec
    scaling = msgspec.structs.asdict(spec.autoscaling)
    sup = engine.supervisor
    while current():
        try:
            needs = await anyio.to_thread.run_sync(requirements) if requirements else None
            await sup.deploy_served(
                spec.name, spec.pack, node=spec.node, low=spec.min, high=spec.max,
                scaling=scaling, model=spec.model, per_node=spec.max_per_node,
                warm=warm_params(engine, spec), requirements=needs,
            )  # fmt: skip
        except Exception as exc:
            if live.failure is None:
                log.warning("deployment %s: Serve could not run it: %s", spec.name, exc)
            live.failure = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            await anyio.sleep(5.0)  # not a hot loop of failing deploys
            continue
        live.failure = None
        live.starting = 0
        served = sup.served(spec.pack)
        demand = served.demand if served is not None else None
        asks = "" if demand is None else (
            f"; each asks for {demand.num_gpus:g} GPU(s), {demand.memory / (1 << 30):.1f} GiB"
        )  # fmt: skip
        log.info("deployment %s runs on Ray Serve (%s replica(s)%s)", spec.name, span(spec), asks)
        if not current():  # undeployed while it was starting
            await sup.undeploy_served(spec.pack)
        return


async def look(engine: Engine, live: Live) -> None:
    """Where Serve runs the replicas now; a change of their count is a decision."""
    sup = engine.supervisor
    await sup.look_served(live.spec.pack)
    served = sup.served(live.spec.pack)
    if served is None or served.handle is None:
        return
    count = sum(1 for r in served.replicas if r.state == "ready")
    if count < live.spec.min:
        return  # replicas starting or being replaced: Serve did not decide that
    if live.served_count is not None and count != live.served_count:
        live.decisions.append(
            Decision(at=now_ms(), replicas_from=live.served_count, replicas_to=count,
                     reason="Ray Serve autoscaling")
        )  # fmt: skip
        log.info(
            "deployment %s: %d -> %d replica(s) (Ray Serve)",
            live.spec.name, live.served_count, count,
        )  # fmt: skip
    live.served_count = count
    live.target = count


def served_view(engine: Engine, live: Live) -> DeploymentView:
    """The view of a deployment on Serve: its replicas as Ray's state API lists them."""
    spec = live.spec
    served = engine.supervisor.served(spec.pack)
    listed = served.replicas if served is not None else []
    replicas = [
        ReplicaView(
            pid=r.pid,
            generation=0,
            where=r.node,
            state=r.state,
            calls_in_flight=0,
            sandboxed=served.sandboxed.get(r.tag) if served is not None else None,
        )
        for r in listed
    ]
    running = served is not None and served.handle is not None
    if live.failure is not None:
        state = f"failing: {live.failure}"
    elif not running:
        state = "deploying"
    elif spec.min == 0 and not any(r.state == "ready" for r in replicas) and listed:
        state = "scaled to zero"
    else:
        state = "ready"
    ongoing = engine.executor.ongoing(spec.pack)
    return DeploymentView(
        name=spec.name, node=spec.node, pack=spec.pack, model=spec.model, min=spec.min,
        max=spec.max, target=live.target, state=state, load=ongoing, queue=0,
        replicas=replicas, autoscaling=spec.autoscaling if spec.min != spec.max else None,
        decisions=list(live.decisions), created_at=spec.created_at,
    )  # fmt: skip
