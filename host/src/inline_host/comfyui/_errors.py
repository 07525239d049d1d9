"""What the importer refuses, and the limits it holds hostile input to.

Errors::

    ComfyImportError            the root: anything the importer refuses
    ├── NotAWorkflow            the input is not a ComfyUI workflow (CLI exit code 2, HTTP 422)
    ├── WorkflowTooLarge        its text is over ``MAX_TEXT`` once inflated (HTTP 413)
    ├── TooManyNodes            its subgraphs expand past ``MAX_NODES`` / ``MAX_VALUES`` (HTTP 422)
    └── ImportStopped           it ran past ``TIME_LIMIT``, or its caller went (HTTP 422 / 499)
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Final

#: The most text read from a workflow (a PNG's text chunks inflated, or a JSON body); a real
#: workflow is a few hundred KB, so past this it is a bomb, not a workflow.
MAX_TEXT: Final = 32 << 20
#: The most nodes a workflow may expand to through its subgraphs (instances included).
MAX_NODES: Final = 10_000
#: The most inputs and widget values those nodes may carry together.
MAX_VALUES: Final = 500_000
#: The longest one conversion may take, in seconds (a real one takes milliseconds).
TIME_LIMIT: Final = 20.0


class ComfyImportError(Exception):
    """Raised when the importer refuses its input."""


class NotAWorkflow(ComfyImportError):
    """Raised when the input is neither a ComfyUI workflow (UI or API) nor a PNG carrying one."""

    def __init__(self, where: str, why: str) -> None:
        super().__init__(f"{where}: not a ComfyUI workflow: {why}")
        self.where = where
        self.why = why


class WorkflowTooLarge(ComfyImportError):
    """Raised when a workflow's text (``what``: a PNG chunk, or the body) passes ``limit`` bytes;
    nothing past the limit is ever inflated."""

    def __init__(self, where: str, what: str, limit: int) -> None:
        super().__init__(
            f"{where}: {what} holds more than {limit >> 20} MiB of text inflated (the most a "
            f"workflow's text may hold, its chunks together; a real one is a few hundred KB): "
            "refused, nothing past the cap is inflated"
        )
        self.where = where
        self.what = what
        self.limit = limit


class TooManyNodes(ComfyImportError):
    """Raised, before anything is built, when a workflow expands past a cap: ``count`` of
    ``what`` (nodes, or inputs and widget values) against ``limit``."""

    def __init__(self, where: str, what: str, count: int, limit: int) -> None:
        shown = f"{count:,}" if count < 10**15 else f"{count:.3e}"
        super().__init__(
            f"{where}: the workflow expands to {shown} {what} through its subgraphs "
            f"(each instance counts its subgraph's contents again); the cap is {limit:,}"
        )
        self.where = where
        self.what = what
        self.count = count
        self.limit = limit


class ImportStopped(ComfyImportError):
    """Raised inside a conversion when its ``Budget`` ran out (``timed_out``) or was stopped
    (the client went, the host is stopping)."""

    def __init__(self, where: str, timed_out: bool, seconds: float) -> None:
        why = (
            f"converting took longer than {seconds:g} s (the most one import may take)"
            if timed_out
            else "the import was stopped (its client went, or the host is stopping)"
        )
        super().__init__(f"{where}: {why}")
        self.where = where
        self.timed_out = timed_out
        self.seconds = seconds


@dataclass(frozen=True, slots=True)
class Budget:
    """How long one conversion may run, and a flag that ends it sooner. The converter calls
    ``check`` as it goes: a worker thread cannot be cancelled, so it has to stop itself."""

    where: str = "input"
    seconds: float = TIME_LIMIT
    stop: threading.Event = field(default_factory=threading.Event)
    deadline: float = field(default=0.0)

    @classmethod
    def start(
        cls, where: str, seconds: float = TIME_LIMIT, stop: threading.Event | None = None
    ) -> Budget:
        """A budget whose clock starts now."""
        return cls(where, seconds, stop or threading.Event(), time.monotonic() + seconds)

    def check(self) -> None:
        """Raise ``ImportStopped`` when stopped or past the deadline."""
        if self.stop.is_set():
            raise ImportStopped(self.where, False, self.seconds)
        if self.deadline and time.monotonic() > self.deadline:
            raise ImportStopped(self.where, True, self.seconds)
