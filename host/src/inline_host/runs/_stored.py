"""A run's identity and its /v1 state when only the store knows it."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

import msgspec
from inline_core import Plan

from ._store import StoredRun
from ._views import NodeState, RunError, RunState, Take


def new_run_id() -> str:
    """``run_`` + 12 lowercase hex."""
    return "run_" + secrets.token_hex(6)


def identify(graph: dict[str, Any], planned: Plan) -> tuple[str, dict[str, Any]]:
    """One walk over a planned submission's nodes: its identity (contract 10.2: ids, types,
    params as sent, inputs), and the graph to store, with random seeds replaced by the ones
    drawn (so a resume redraws none)."""
    identity: list[Any] = []
    stored: list[Any] = []
    for node in graph.get("nodes") or []:
        inputs = node.get("inputs") or {}
        wired = {
            port: [[e.get("from"), e.get("output")] for e in (v if isinstance(v, list) else [v])]
            for port, v in sorted(inputs.items())
        }
        identity.append([node.get("id"), node.get("type"), node.get("params") or {}, wired])
        stored.append(_with_drawn_seeds(node, planned))
    canonical = msgspec.json.encode([planned.target, identity], order="sorted")
    return hashlib.sha256(canonical).hexdigest(), {**graph, "nodes": stored}


def _with_drawn_seeds(node: Any, planned: Plan) -> Any:
    """``node`` with its seed params as the plan drew them (itself when it has none)."""
    if not isinstance(node, dict) or node.get("id") not in planned:
        return node
    p = planned.node(node["id"])
    seeds = {f.key for f in p.descriptor.params if f.widget == "seed"}
    if not seeds:
        return node
    params = dict(node.get("params") or {})
    params.update({k: p.params[k] for k in seeds if k in p.params})
    return {**node, "params": params}


def stored_state(stored: StoredRun, takes: list[Take]) -> RunState:
    """The /v1 state of a run known only from the store."""
    state = stored.state or {}
    nodes = {k: msgspec.convert(v, NodeState) for k, v in (state.get("nodes") or {}).items()}
    err = state.get("error")
    return RunState(
        run_id=stored.run_id,
        status=stored.status,
        target=stored.target,
        fraction=float(state.get("fraction", 0.0)),
        nodes=nodes,
        takes=takes,
        error=msgspec.convert(err, RunError) if err else None,
    )
