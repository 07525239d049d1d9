"""What a deployment is (as stored), how ``/v1/deployments`` shows it, and its running state."""

from __future__ import annotations

import time
from collections import deque

import msgspec

from .._errors import InlineHostError

#: Scaling decisions a deployment's view keeps.
KEPT_DECISIONS = 20


class DeploymentError(InlineHostError):
    """A deployment asked for that cannot be made (the message names what and why)."""


class DeploymentExists(DeploymentError):
    """A deployment of that name exists already."""


class Autoscaling(msgspec.Struct, frozen=True, kw_only=True):
    """How a deployment between ``min`` and ``max`` follows its calls."""

    target_ongoing: float = 1.0
    upscale_delay_s: float = 0.0
    downscale_delay_s: float = 30.0
    idle_s: float = 300.0


class DeploymentSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A deployment as stored."""

    name: str
    node: str
    pack: str
    model: str | None
    min: int
    max: int
    autoscaling: Autoscaling
    created_at: int
    #: On a Ray cluster: at most this many replicas on one node (Serve's
    #: ``max_replicas_per_node``); None lets Serve pack them as it will.
    max_per_node: int | None = None


class Decision(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One scaling decision."""

    at: int
    replicas_from: int
    replicas_to: int
    reason: str


class ReplicaView(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A replica as ``GET /v1/deployments`` shows it."""

    pid: int | None
    generation: int
    where: str
    state: str
    calls_in_flight: int
    #: Whether its worker runs in a sandbox (None: not known yet, a Serve replica no call
    #: reached)
    sandboxed: bool | None = None


class DeploymentView(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A deployment as ``GET /v1/deployments`` shows it."""

    name: str
    node: str
    pack: str
    model: str | None
    min: int
    max: int
    target: int
    state: str
    load: int
    queue: int
    replicas: list[ReplicaView]
    autoscaling: Autoscaling | None
    decisions: list[Decision]
    created_at: int


class Live:
    """A deployment's running state: its chosen size and when it last wanted another."""

    def __init__(self, spec: DeploymentSpec) -> None:
        self.spec = spec
        self.target = spec.min
        self.want_more_since: float | None = None
        self.want_fewer_since: float | None = None
        self.last_call = time.monotonic()
        self.decisions: deque[Decision] = deque(maxlen=KEPT_DECISIONS)
        self.failure: str | None = None
        self.starting = 0
        #: Replicas (by generation) loading the deployment's model, warm, or that failed to
        #: (with the reason): a replica is ready once warm.
        self.warming: set[int] = set()
        self.warmed: set[int] = set()
        self.cold: dict[int, str] = {}
        #: Replicas Serve ran when last looked (deployments on Ray only).
        self.served_count: int | None = None


def span(spec: DeploymentSpec) -> str:
    """``2`` for a fixed count, ``0..4`` for a range."""
    return str(spec.min) if spec.min == spec.max else f"{spec.min}..{spec.max}"
