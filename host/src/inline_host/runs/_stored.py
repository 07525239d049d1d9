"""A run's identity and its /v1 state when only the store knows it."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

import msgspec

from ._store import StoredRun
from ._views import NodeState, RunError, RunState, Take


def new_run_id() -> str:
    """``run_`` + 12 lowercase hex."""
    return "run_" + secrets.token_hex(6)


def request_hash(graph: dict[str, Any], target: str) -> str:
    """The contract's identity of a submission (10.2): ids, types, params as sent, inputs."""
    nodes = []
    for node in graph.get("nodes") or []:
        inputs = node.get("inputs") or {}
        wired = {
            port: [[e.get("from"), e.get("output")] for e in (v if isinstance(v, list) else [v])]
            for port, v in sorted(inputs.items())
        }
        nodes.append([node.get("id"), node.get("type"), node.get("params") or {}, wired])
    canonical = msgspec.json.encode([target, nodes], order="sorted")
    return hashlib.sha256(canonical).hexdigest()


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
