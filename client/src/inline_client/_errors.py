"""The client's errors.

InlineError                 every error this client raises
├── ApiError                the server answered an error (``status``, ``code``, ``message``)
│   └── GraphInvalid        a graph failed validation (``errors``: every problem, 422)
├── RunFailed               a run ended in ``error`` or ``cancelled`` (``state``)
└── DownloadFailed          a download ended ``failed`` or ``cancelled``, or not in time
                            (``download``)
"""

from __future__ import annotations

from typing import Any


class InlineError(Exception):
    """Every error this client raises."""


class ApiError(InlineError):
    """The server answered an error."""

    def __init__(self, status: int, code: str, message: str, body: Any = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.body = body


class GraphInvalid(ApiError):
    """A graph failed validation; ``errors`` holds every problem (each with ``nodeId``,
    ``path``, ``message``...)."""

    def __init__(self, status: int, code: str, message: str, errors: list[dict[str, Any]],
                 body: Any = None) -> None:  # fmt: skip
        super().__init__(status, code, message, body)
        self.errors = errors


class RunFailed(InlineError):
    """A run ended without a result."""

    def __init__(self, state: Any) -> None:
        error = getattr(state, "error", None)
        message = error.message if error is not None else state.status
        super().__init__(f"run {state.run_id} {state.status}: {message}")
        self.state = state


class DownloadFailed(InlineError):
    """A download ended without its model (``failed``, ``cancelled``), or did not end within
    the time given; ``download`` is its last state."""

    def __init__(self, download: Any, why: str | None = None) -> None:
        reason = why or download.error or download.state
        super().__init__(f"download {download.download_id} of {download.source}: {reason}")
        self.download = download
