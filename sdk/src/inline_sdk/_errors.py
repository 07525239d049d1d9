"""Exceptions of the node SDK.

The tree is shallow on purpose::

    InlineSdkError             root of everything this package raises
    ├── NodeDeclarationError   a node's declaration is malformed (all problems at once)
    ├── ParamsInvalid          params do not match a node's schema (each issue has a JSON path)
    ├── ProtocolError          the IPC stream broke its rules (bad or oversized frame, closed peer)
    │   └── FrameTooLarge      a frame exceeds the hard size limit
    └── Cancelled              the host cancelled the call (``Context.check_cancelled``)

Errors raised by node code cross the wire as a ``RemoteError`` struct (type, message, traceback),
never as pickled exception objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class InlineSdkError(Exception):
    """Root of every exception raised by ``inline_sdk``."""


class NodeDeclarationError(InlineSdkError):
    """Raised when node declarations are malformed; ``problems`` lists every one found."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        joined = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{len(self.problems)} problem(s) in node declarations:\n{joined}")


@dataclass(frozen=True, slots=True)
class ParamIssue:
    """One param that does not match its schema."""

    path: str
    message: str
    expected: str | None = None
    got: object = None


class ParamsInvalid(InlineSdkError):
    """Raised when a node's params do not match its schema."""

    def __init__(self, node_type: str, issues: Sequence[ParamIssue]) -> None:
        self.node_type = node_type
        self.issues = tuple(issues)
        joined = "; ".join(f"{i.message} (at {i.path})" for i in self.issues)
        super().__init__(f"Invalid params for '{node_type}': {joined}")


class ProtocolError(InlineSdkError):
    """Raised when the IPC byte stream breaks the protocol's rules."""


class FrameTooLarge(ProtocolError):
    """Raised when a frame is larger than the hard limit, on either side."""

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(
            f"IPC frame of {size} bytes exceeds the limit of {limit} bytes; "
            "bulk data must travel through shared memory"
        )


class Cancelled(InlineSdkError):
    """Raised inside node code by ``Context.check_cancelled`` once the host cancelled the call."""

    def __init__(self) -> None:
        super().__init__("cancelled")
