"""Which model files a node reads, and a stamp of each one's content for its cache key.

A node's cache key must change when a model it loads changes, even under the same name (a
checkpoint replaced in place), and planning must never read a 12 GB checkpoint to find out.
A file's stamp is therefore cheap and content-derived:

- a small file (configs, tokenizers, up to ``SMALL_BYTES``) is hashed whole;
- a large one is stamped by its size and modification time, plus, for safetensors, the hash of
  its header (dtypes, shapes, offsets, metadata): replacing it changes the stamp, an untouched
  one is never re-read;
- a folder (a diffusers pipeline, an LLM) is the stamps of every file in it.

Stamps are memoised by (path, inode, size, mtime), so a second plan costs a ``stat`` per file.
The files come from the node's params that pick from a models catalog (an empty pick is what
the node loads then: the manifest's recommended file, else the catalog's first entry; nothing
for the catalogs whose empty pick means none, ``EMPTY_IS_NONE``), and
from the model files its manifest names without a param (the one-click node's components).
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
import threading
from pathlib import Path
from typing import Any, Final

from inline_sdk import UnsafeName

#: Files up to this size are hashed whole (configs, tokenizers, small LoRAs).
SMALL_BYTES: Final = 4 << 20
#: A safetensors header larger than this is not read (it is not a real one): size and mtime only.
MAX_HEADER: Final = 100 << 20
#: The most files of a model folder that are stamped (a folder with more is stamped by them).
MAX_FILES: Final = 10_000
#: Catalogs whose empty pick means "none", not "the first entry" (the contract's pickers show it
#: as None for controlnet and No character; a diffusers/generate checkpoint is optional too).
EMPTY_IS_NONE: Final = frozenset({"controlnet", "characters", "checkpoints"})
#: Graphs with more nodes than this are planned in a worker thread whatever they read.
LOOP_PLAN_NODES: Final = 64


def model_files(registry: Any, node: Any, catalogs: Any) -> list[tuple[str, Path | None]]:
    """``(category/name, path or None when absent)`` of every model file ``node`` reads."""
    entry = registry.lookup(node.type) if registry is not None else None
    if registry is None or entry is None:
        return []
    manifest = registry.node_manifest(node.type)
    models = manifest.models if manifest is not None else ()
    recommended = {m.param: m.file for m in models if m.param}
    found: list[tuple[str, Path | None]] = []
    for param in entry.descriptor.params:
        category = param.options_from
        if category is None:
            continue
        name = node.params.get(param.key, param.default)
        if category in EMPTY_IS_NONE and not name:
            continue
        if not isinstance(name, str) or not name:
            names = catalogs.entries(category)
            rec = recommended.get(param.key)
            name = rec if rec in names else (names[0] if names else "")
        if name:
            found.append(_find(catalogs, category, name))
    found += [_find(catalogs, m.category, m.file) for m in models if not m.param and m.file]
    return found


class PlanReads:
    """Tells the plans that touch the file system (or are large) from those that do not.

    Planning hashes the files a param names (``{"ref": "path"}``, ``guard.InputPaths``) and
    stamps the model files a node loads (``model_files``: catalogs listed, files stat-ed and
    read once); such a plan is made in a worker thread. Any other plan is pure computation of
    tens of microseconds, cheaper on the event loop than the hop to a thread.
    """

    def __init__(self) -> None:
        #: Per node type of one registry, whether its nodes load model files.
        self._memo: tuple[Any, dict[str, bool]] = (None, {})

    def check(self, registry: Any, inputs: Any, request: Any) -> bool:
        """Whether planning ``request`` against ``registry`` may read files (``inputs``: the
        ``InputPaths`` that would hash them) or has more than ``LOOP_PLAN_NODES`` nodes."""
        graph = request.get("graph") if isinstance(request, dict) else None
        nodes = graph.get("nodes") if isinstance(graph, dict) else None
        if not isinstance(nodes, list):
            return False  # refused before anything is read
        if len(nodes) > LOOP_PLAN_NODES:
            return True
        if self._memo[0] is not registry:
            self._memo = (registry, {})
        loads = self._memo[1]
        for node in nodes:
            if not isinstance(node, dict):
                continue
            kind = node.get("type")
            if isinstance(kind, str):
                known = loads.get(kind)
                if known is None and registry.lookup(kind) is not None:  # known types only
                    known = loads[kind] = _loads_models(registry, kind)
                if known:
                    return True
            params = node.get("params")
            if params and inputs.names_paths(params):
                return True
        return False


def _loads_models(registry: Any, node_type: str) -> bool:
    """Whether a node of ``node_type`` loads model files (the ones ``model_files`` finds)."""
    entry = registry.lookup(node_type)
    if entry is None:
        return False
    if any(p.options_from is not None for p in entry.descriptor.params):
        return True
    manifest = registry.node_manifest(node_type)
    return manifest is not None and any(not m.param and m.file for m in manifest.models)


def _find(catalogs: Any, category: str, name: str) -> tuple[str, Path | None]:
    try:
        return f"{category}/{name}", catalogs.find(category, name)
    except UnsafeName:
        return f"{category}/{name}", None


class ModelStamps:
    """Content stamps of model files and folders, memoised by identity and mtime."""

    def __init__(self) -> None:
        self._memo: dict[tuple[str, int, int, int], str] = {}
        self._lock = threading.Lock()

    def stamp(self, path: Path) -> str:
        """The stamp of a model file, or of every file of a model folder."""
        try:
            st = os.stat(path)
        except OSError:
            return "missing"
        if not stat.S_ISDIR(st.st_mode):
            return self._file(path, st)
        h = hashlib.sha256()
        for count, (rel, file) in enumerate(_walk(path)):
            if count >= MAX_FILES:
                break
            try:
                file_stat = os.stat(file)
            except OSError:
                continue  # a dangling link, or gone since the walk
            h.update(f"{rel}\0{self._file(file, file_stat)}\0".encode())
        return h.hexdigest()[:32]

    def _file(self, path: Path, st: os.stat_result) -> str:
        if not stat.S_ISREG(st.st_mode):
            return f"special:{stat.S_IFMT(st.st_mode)}"  # never opened: a FIFO would block
        memo = (str(path), st.st_ino, st.st_size, st.st_mtime_ns)
        with self._lock:
            known = self._memo.get(memo)
        if known is not None:
            return known
        h = hashlib.sha256()
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
        except OSError:
            return f"unreadable:{st.st_size}:{st.st_mtime_ns}"
        try:
            if st.st_size <= SMALL_BYTES:
                h.update(b"whole\0")
                while chunk := os.read(fd, 1 << 20):
                    h.update(chunk)
            else:
                h.update(f"stat\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
                if path.suffix == ".safetensors":
                    h.update(_header(fd))
        finally:
            os.close(fd)
        digest = h.hexdigest()[:32]
        with self._lock:
            self._memo[memo] = digest
        return digest


def _header(fd: int) -> bytes:
    """The raw safetensors header (empty when the file is not a plausible one)."""
    head = os.read(fd, 8)
    if len(head) < 8:
        return b""
    (size,) = struct.unpack("<Q", head)
    if size > MAX_HEADER:
        return b""
    out = bytearray()
    while len(out) < size and (chunk := os.read(fd, min(1 << 20, size - len(out)))):
        out += chunk
    return bytes(out)


def _walk(folder: Path) -> list[tuple[str, Path]]:
    """Every file under ``folder`` (links followed, hidden entries skipped), sorted."""
    files: list[tuple[str, Path]] = []
    seen: set[tuple[int, int]] = set()
    for root, dirs, names in os.walk(folder, followlinks=True):
        try:
            st = os.stat(root)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) in seen:  # a link loop
            dirs[:] = []
            continue
        seen.add((st.st_dev, st.st_ino))
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in names:
            if not name.startswith("."):
                full = Path(root) / name
                files.append((str(full.relative_to(folder)), full))
        if len(files) > MAX_FILES:
            break
    return sorted(files)
