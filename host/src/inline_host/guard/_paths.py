"""Files that run params name by path: checked before anything reads them, hashed with a cap.

A ``{"ref": "path", "path": ...}`` value anywhere in a node's params is folded into the node's
cache key by its content hash. Before a single byte is read, the path must resolve inside the
input roots and name a regular file no larger than the cap; the file is opened without blocking
(a FIFO swapped in after the check is caught by ``fstat``), so a hostile path can never freeze
the host. The plan that calls this runs in a worker thread, off the event loop.
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from inline_core import GraphInvalid, GraphNode, Issue

#: How deep params are searched for path references (deeper nesting is refused earlier).
MAX_DEPTH = 32
CHUNK = 1 << 20


class PathRefused(Exception):
    """A path param that may not be read; the message says why."""


def path_refs(value: Any, where: str, depth: int = 0) -> Iterator[tuple[str, Any]]:
    """Every ``{"ref": "path"}`` value inside ``value`` with its JSON path."""
    if depth > MAX_DEPTH:
        return
    if isinstance(value, dict):
        if value.get("ref") == "path":
            yield where, value.get("path")
            return
        for k, v in value.items():
            yield from path_refs(v, f"{where}.{k}", depth + 1)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from path_refs(v, f"{where}[{i}]", depth + 1)


class InputPaths:
    """Checks and hashes the files run params name by path."""

    def __init__(self, roots: Sequence[Path], cwd: Path, max_bytes: int) -> None:
        self.roots = tuple(Path(os.path.realpath(r)) for r in roots)
        self.cwd = cwd
        self.max_bytes = max_bytes
        self._memo: dict[tuple[str, int, int, int], str] = {}
        self._lock = threading.Lock()

    def names_paths(self, params: Any) -> bool:
        """Whether ``params`` hold a path reference at all (then planning reads files)."""
        return next(path_refs(params, ""), None) is not None

    def fingerprint(self, node: GraphNode) -> str | None:
        """Content hashes of the files ``node``'s params name; raises ``GraphInvalid`` (422)
        naming the node and the param for a path that may not be read."""
        parts: list[str] = []
        for where, raw in path_refs(node.params, f"$.graph.nodes[{node.index}].params"):
            try:
                parts.append(self.hash_file(raw))
            except PathRefused as exc:
                issue = Issue(
                    code="invalid_input",
                    message=f"Node '{node.id}': {exc}",
                    node_id=node.id,
                    path=where,
                )
                raise GraphInvalid([issue]) from None
        return "|".join(parts) or None

    def resolve(self, raw: Any) -> Path:
        """The real path ``raw`` names, inside the input roots (nothing is opened)."""
        if not isinstance(raw, str) or not raw:
            raise PathRefused("a path reference needs a non-empty 'path' string")
        if "\x00" in raw:
            raise PathRefused("the path contains a NUL character")
        if len(raw) > 4096:
            raise PathRefused("the path is longer than 4096 characters")
        given = Path(raw)
        real = Path(os.path.realpath(given if given.is_absolute() else self.cwd / given))
        if not any(real.is_relative_to(root) for root in self.roots):
            roots = ", ".join(str(r) for r in self.roots) or "(none)"
            raise PathRefused(
                f"path '{raw}' is outside the allowed input roots ({roots}); add its folder to "
                "INLINE_INPUT_ROOTS or upload it with 'inline assets add'"
            )
        return real

    def hash_file(self, raw: Any) -> str:
        """The sha256 of the regular file ``raw`` names (memoised by identity and mtime)."""
        real = self.resolve(raw)
        try:
            st = os.stat(real)
        except OSError as exc:
            raise PathRefused(f"input file '{raw}' cannot be read: {exc.strerror}") from None
        self._check(raw, st)
        memo = (str(real), st.st_ino, st.st_mtime_ns, st.st_size)
        with self._lock:
            known = self._memo.get(memo)
        if known is not None:
            return known
        try:
            fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
        except OSError as exc:
            raise PathRefused(f"input file '{raw}' cannot be read: {exc.strerror}") from None
        h = hashlib.sha256()
        try:
            self._check(raw, os.fstat(fd))  # the file opened is the file checked
            left = self.max_bytes + 1
            while left > 0 and (chunk := os.read(fd, min(CHUNK, left))):
                h.update(chunk)
                left -= len(chunk)
            if left <= 0:
                raise PathRefused(self._too_large(raw))
        finally:
            os.close(fd)
        digest = h.hexdigest()
        with self._lock:
            self._memo[memo] = digest
        return digest

    def _check(self, raw: str, st: os.stat_result) -> None:
        if not stat.S_ISREG(st.st_mode):
            what = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise PathRefused(f"input '{raw}' is {what}")
        if st.st_size > self.max_bytes:
            raise PathRefused(self._too_large(raw))

    def _too_large(self, raw: str) -> str:
        mb = self.max_bytes / (1024 * 1024)
        return f"input file '{raw}' is larger than {mb:g} MB (INLINE_MAX_UPLOAD_MB)"
