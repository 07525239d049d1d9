"""What ``inline run`` tells a user: one line for their mistakes, a traceback for node bugs.

A node error whose remote type is a user's mistake (a missing or unreadable input, a bad asset
id, missing model files, params refused by the node) prints its message only; the remote
traceback appears with ``--debug`` or ``INLINE_DEBUG=1``. Any other node error is a bug in the
node, and keeps its traceback. A node that failed in the host, not in its worker, with an error
the host does not know (a bug of ours), gets the host-side traceback with ``--debug``.
"""

from __future__ import annotations

import copy
import traceback
from pathlib import Path
from typing import Any

from inline_core import NodeFailed

from .._errors import USER_MISTAKES, InlineHostError, NodeError

__all__ = ("USER_MISTAKES", "check_out_dir", "describe_failure", "resolve_path_refs")


def describe_failure(exc: BaseException, *, debug: bool = False) -> str:
    """A failed run's message: each failed node and its error (every one, when several failed
    at once); the remote traceback for a node's bug (or always, with ``debug``)."""
    if isinstance(exc, NodeFailed) and exc.siblings:
        lines = [f"{len(exc.failures)} nodes failed:"]
        lines += [f"  - {_describe_one(f, debug)}" for f in exc.failures]
        return "\n".join(lines)
    return _describe_one(exc, debug)


def _describe_one(exc: BaseException, debug: bool) -> str:
    cause = exc.__cause__ if isinstance(exc, NodeFailed) and exc.__cause__ else exc
    if isinstance(cause, NodeError):
        node = f"node '{cause.node_id}' ({cause.node_type})"
        if cause.remote_type in USER_MISTAKES and not debug:
            return f"{node}: {cause.remote_message}"
        return f"{node} failed: {cause.remote_type}: {cause.remote_message}\n{cause.traceback}"
    if isinstance(exc, NodeFailed):  # the worker died, timed out, refused to start...
        line = f"node '{exc.node_id}' ({exc.node_type}): {exc}"
        if debug and not isinstance(cause, InlineHostError):  # the host's own bug: where
            return f"{line}\n{_traceback(cause)}"
        return line
    return str(exc)


def _traceback(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc)).rstrip()


def resolve_path_refs(request: Any, base: Path) -> Any:
    """The request with every relative ``{"ref": "path", "path": ...}`` param made absolute
    against ``base`` (the graph file's folder), so a graph file means the same from any cwd."""
    if not isinstance(request, dict) or not isinstance(request.get("graph"), dict):
        return request
    out = copy.deepcopy(request)
    for node in out["graph"].get("nodes") or []:
        params = node.get("params") if isinstance(node, dict) else None
        if not isinstance(params, dict):
            continue
        for value in params.values():
            if isinstance(value, dict) and value.get("ref") == "path":
                path = value.get("path")
                if isinstance(path, str) and path and not Path(path).is_absolute():
                    value["path"] = str((base / path).resolve())
    return out


def check_out_dir(out: Path) -> str | None:
    """Why ``--out`` cannot hold the outputs (checked before anything runs), else None."""
    if out.exists() and not out.is_dir():
        return f"--out {out} is an existing file, not a folder: name a folder (it is created)"
    parent = next((p for p in (out, *out.parents) if p.exists()), None)
    if parent is not None and not parent.is_dir():
        return f"--out {out}: {parent} is a file, not a folder"
    return None
