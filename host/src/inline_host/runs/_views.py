"""The /v1 JSON shapes of runs, node states, takes and events (camelCase, contract field order)."""

from __future__ import annotations

from typing import Any

import msgspec


class NodeState(msgspec.Struct, kw_only=True, omit_defaults=True, rename="camel"):
    """One closure node's state in a run (contract 4.4).

    ``state`` is ``queued``, ``running``, ``done``, ``cached``, ``error``, and at the end of a
    run ``cancelled`` or ``skipped`` (never needed, or upstream failed). ``partial`` (our
    addition) holds the text each output streamed so far, while the node runs.
    """

    state: str
    fraction: float
    phase: str | None = None
    step: int | None = None
    step_count: int | None = None
    status: str | None = None
    partial: dict[str, str] | None = None
    #: Why the node failed (our addition), once its state is ``error``.
    error: str | None = None


class NodeFailure(msgspec.Struct, frozen=True, rename="camel"):
    """One failed node of a run: ``{"nodeId", "message"}``."""

    node_id: str
    message: str


class RunError(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    """``{"nodeId": ..., "message": ...}``: both keys always present, the first failure's.

    ``errors`` (our addition, like the 422's) lists every node that failed, the first one
    included, when more than one did (independent nodes failing at once); each failed node's
    state also says why (``NodeState.error``).
    """

    node_id: str | None
    message: str
    errors: tuple[NodeFailure, ...] | None = None


class Take(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A take as /v1 shows it (contract 6.1), and two fields of ours after the contract's:
    ``output``, the node's output port it came from (a node with several outputs makes several
    takes), and ``url``, where its bytes are served. A media take's ``uri`` stays the contract's
    server-local path (which Studio's in-process path copies); a text take (ours: the contract's
    kinds are media) has no file, and its ``uri`` is its URL."""

    id: str
    run_id: str
    node_id: str
    kind: str
    uri: str
    hash: str
    params: dict[str, Any]
    created_at: int
    output: str
    url: str


class RunState(msgspec.Struct, kw_only=True, rename="camel"):
    """The full state of a run (``GET /v1/runs/{id}`` and the websocket snapshot)."""

    run_id: str
    status: str
    target: str
    fraction: float
    nodes: dict[str, NodeState]
    takes: list[Take]
    error: RunError | None


class RunSummary(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One run in ``GET /v1/runs`` (the live queue; finished runs too with ``status=``)."""

    run_id: str
    status: str
    target: str
    fraction: float
    queue_position: int | None


class Submitted(msgspec.Struct, frozen=True, rename="camel"):
    """``{"runId", "status"}``: the answer to a submit or a cancel."""

    run_id: str
    status: str
