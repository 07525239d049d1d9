"""Exceptions of the kernel, and the ``Issue`` every validation problem is reported as.

The tree is shallow on purpose::

    InlineCoreError            root of everything this package raises
    ├── DocumentInvalid        a document was refused; ``issues`` lists every problem found
    │   ├── RequestInvalid     the run request itself is malformed (code ``invalid_request``)
    │   └── GraphInvalid       the graph fails shape or semantic checks (code ``invalid_graph``)
    ├── NodeFailed             a node raised during a run (``node_id``, ``node_type``, ``cause``)
    └── StaleInput             an executor cannot use some ``inputs`` any more: the run
                               computes their producers again (a bounded number of times)

Cancellation is never wrapped: anyio's cancellation exception always propagates untouched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

__all__ = (
    "DocumentInvalid",
    "GraphInvalid",
    "InlineCoreError",
    "Issue",
    "NodeFailed",
    "RequestInvalid",
    "StaleInput",
)


class InlineCoreError(Exception):
    """Root of every exception raised by ``inline_core``."""


@dataclass(frozen=True, slots=True)
class Issue:
    """One problem found in a submitted document.

    ``path`` is a JSON path into the request (``$.graph.nodes[3].params.width``, ``$.target``);
    ``expected``/``got`` are filled for value checks (params against their schema).
    """

    code: str
    message: str
    node_id: str | None
    path: str
    expected: str | None = None
    got: Any = None

    def to_json(self) -> dict[str, Any]:
        """The issue as API JSON: ``nodeId`` is omitted when unknown, ``expected``/``got`` when
        the issue is not a value check (``got`` is kept, possibly ``null``, whenever ``expected``
        is set)."""
        out: dict[str, Any] = {}
        if self.node_id is not None:
            out["nodeId"] = self.node_id
        out["path"] = self.path
        out["message"] = self.message
        if self.expected is not None:
            out["expected"] = self.expected
            out["got"] = self.got
        return out


class DocumentInvalid(InlineCoreError):
    """Raised when a submitted document is refused; ``issues`` holds every problem, in order.

    ``str()`` is the first issue's message and ``node_id`` its node, which is what the contract's
    single-error envelope (``{"error": {"code", "message", "nodeId"?}}``) reports.
    """

    code: ClassVar[str] = "invalid"

    def __init__(self, issues: Sequence[Issue]) -> None:
        if not issues:
            raise ValueError(f"{type(self).__name__} needs at least one issue")
        self.issues: tuple[Issue, ...] = tuple(issues)
        super().__init__(self.issues[0].message)

    @property
    def first(self) -> Issue:
        """The issue a single-error client sees."""
        return self.issues[0]

    @property
    def node_id(self) -> str | None:
        """The first issue's node id, if it names one."""
        return self.issues[0].node_id

    def to_json(self) -> dict[str, Any]:
        """The contract's error object (code, message, nodeId when known) plus every issue."""
        out: dict[str, Any] = {"code": self.code, "message": self.first.message}
        if self.node_id is not None:
            out["nodeId"] = self.node_id
        out["issues"] = [issue.to_json() for issue in self.issues]
        return out


class RequestInvalid(DocumentInvalid):
    """Raised when a run request is malformed (not an object, ``target`` missing)."""

    code: ClassVar[str] = "invalid_request"

    @classmethod
    def of(cls, message: str, path: str) -> RequestInvalid:
        """A ``RequestInvalid`` with one issue."""
        return cls([Issue(code=cls.code, message=message, node_id=None, path=path)])


class GraphInvalid(DocumentInvalid):
    """Raised when a graph fails shape (contract 1.3 stage A) or semantic (stage B) checks."""

    code: ClassVar[str] = "invalid_graph"


class NodeFailed(InlineCoreError):
    """Raised when a node fails during a run; the node's own exception is ``cause``.

    ``str()`` is the cause's message (its class name when it has none), which is what the
    contract's run-level ``error.message`` carries. When other nodes of the same run failed as
    well (independent loaders that all miss their files), this is the first of them and
    ``siblings`` holds the rest, in the order they failed; ``failures`` is all of them.
    """

    def __init__(self, node_id: str, node_type: str, cause: BaseException) -> None:
        self.node_id = node_id
        self.node_type = node_type
        self.cause = cause
        self.siblings: tuple[NodeFailed, ...] = ()
        super().__init__(str(cause) or type(cause).__name__)
        self.__cause__ = cause

    @property
    def failures(self) -> tuple[NodeFailed, ...]:
        """This failure and its siblings, first to last."""
        return (self, *self.siblings)


class StaleInput(InlineCoreError):
    """Raised by an ``Executor`` when some inputs of a node can no longer be used: values that
    lived in a process that is gone (an engine handle of a worker that died). ``inputs`` are
    their (port, index) positions in the inputs the executor was given; the run drops the
    outputs of the nodes that produced them, computes those again and calls the executor
    again, a bounded number of times, before the node fails with this as its cause.
    """

    def __init__(self, inputs: Sequence[tuple[str, int]], reason: str) -> None:
        if not inputs:
            raise ValueError("StaleInput needs at least one input position")
        self.inputs: tuple[tuple[str, int], ...] = tuple(inputs)
        self.reason = reason
        super().__init__(reason)
