"""``inline run FILE``: a graph run in this process, its progress on stderr, the target's outputs
written to ``--out`` (PNGs carry the same ``inline`` recipe chunk as API takes)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from inline_core import GraphInvalid, InlineCoreError, NodeFailed, PlannedNode
from inline_sdk.protocol import MediaValue, Preview, Progress, Stream, TextValue

from .._errors import InlineHostError
from .._settings import Settings
from .._values import HostValue, media_extension
from ..hub import secrets_reader
from ..runs import Engine, png_with_recipe
from ._friendly import check_out_dir, describe_failure, resolve_path_refs

EXIT_FAILED = 1
EXIT_INVALID = 2


class ConsoleProgress:
    """Prints a run's progress to a terminal (one updating line) or a log (one line per event)."""

    def __init__(
        self,
        total: int,
        out: TextIO = sys.stderr,
        *,
        target: str | None = None,
        text_out: TextIO = sys.stdout,
    ) -> None:
        self.total = total
        self.target = target
        self.text_out = text_out
        #: Whether the target streamed text to ``text_out`` (then it needs a closing newline).
        self.streamed = False
        self.done = 0
        self.out = out
        self.tty = out.isatty()
        self.started: dict[str, float] = {}
        self._last = 0.0

    def node_started(self, node: PlannedNode) -> None:
        self.started[node.id] = time.perf_counter()

    def node_progress(self, node_id: str, event: Any) -> None:
        if isinstance(event, Stream):
            if node_id == self.target:  # the target's text, as it arrives
                self.text_out.write(event.text)
                self.text_out.flush()
                self.streamed = True
            return
        if isinstance(event, Preview) or not isinstance(event, Progress):
            return
        now = time.perf_counter()
        if not self.tty and now - self._last < 0.5 and event.fraction < 1.0:
            return
        self._last = now
        bar = "#" * int(event.fraction * 20)
        line = f"  {node_id}: {event.phase} [{bar:<20}] {event.status}"
        if self.tty:
            self.out.write("\r\033[K" + line)
        else:
            self.out.write(line + "\n")
        self.out.flush()

    def node_failed(self, node: PlannedNode, error: NodeFailed) -> None:
        self.done += 1
        prefix = "\r\033[K" if self.tty else ""
        self.out.write(f"{prefix}[{self.done}/{self.total}] {node.id} ({node.type}) failed\n")
        self.out.flush()

    def node_finished(self, node: PlannedNode, outputs: dict[str, Any], cached: bool) -> None:
        self.done += 1
        took = (time.perf_counter() - self.started.get(node.id, time.perf_counter())) * 1000
        how = "cached" if cached else f"{took:.0f} ms"
        prefix = "\r\033[K" if self.tty else ""
        self.out.write(f"{prefix}[{self.done}/{self.total}] {node.id} ({node.type}) {how}\n")
        self.out.flush()


def print_invalid(err: GraphInvalid, out: TextIO) -> None:
    """Every validation issue, one per line, with node id and JSON path."""
    out.write(f"error: the graph is invalid ({len(err.issues)} problem(s)):\n")
    for issue in err.issues:
        where = f" [node '{issue.node_id}']" if issue.node_id else ""
        out.write(f"  - {issue.message}{where} at {issue.path}\n")
        if issue.expected is not None:
            out.write(f"      expected {issue.expected}, got {json.dumps(issue.got)}\n")


async def run_graph(args: argparse.Namespace) -> int:
    """``inline run FILE``: validate, run, write the target's outputs; the exit code."""
    graph_file = Path(args.file)
    try:
        request = json.loads(graph_file.read_text())
    except OSError as exc:
        print(f"error: cannot read run request '{args.file}': {exc.strerror}", file=sys.stderr)
        return EXIT_INVALID
    except json.JSONDecodeError as exc:
        print(f"error: '{args.file}' is not JSON: {exc}", file=sys.stderr)
        return EXIT_INVALID
    if args.target is not None and isinstance(request, dict):
        request["target"] = args.target
    out_dir = Path(args.out)
    problem = check_out_dir(out_dir)
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_INVALID
    # {"ref": "path"} inputs are relative to the graph file, which may be read from its folder.
    base = graph_file.resolve().parent
    request = resolve_path_refs(request, base)
    settings = Settings.from_env()
    if getattr(args, "debug", False):
        settings = replace(settings, debug=True)
    if base not in settings.input_roots:
        settings = replace(settings, input_roots=(*settings.input_roots, base))
    say = lambda m: print(m, file=sys.stderr)  # noqa: E731
    secrets = secrets_reader(settings.data_dir)
    async with Engine.open(settings, say=say, secrets=secrets) as engine:
        try:
            planned = engine.prepare(request)
        except GraphInvalid as exc:
            print_invalid(exc, sys.stderr)
            return EXIT_INVALID
        except InlineCoreError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_INVALID
        try:
            console = ConsoleProgress(len(planned.nodes), target=planned.target)
            result = await engine.run_plan(planned, console)
            if console.streamed:
                sys.stdout.write("\n")
        except (InlineCoreError, InlineHostError) as exc:
            print(f"error: {describe_failure(exc, debug=settings.debug)}", file=sys.stderr)
            return EXIT_FAILED
        out_dir.mkdir(parents=True, exist_ok=True)
        target = planned.node(planned.target)
        graph = request.get("graph") if isinstance(request, dict) else None
        names = request.get("outputNames") if isinstance(request, dict) else None
        prefix = names.get(target.id) if isinstance(names, dict) else None
        written = write_outputs(
            engine, target, result.outputs, out_dir, graph,
            prefix=prefix if isinstance(prefix, str) else None,
        )  # fmt: skip
    for path in written:
        print(path)
    return 0


def write_outputs(
    engine: Engine,
    target: PlannedNode,
    outputs: dict[str, HostValue],
    out_dir: Path,
    graph: dict[str, Any] | None,
    *,
    prefix: str | None = None,
) -> list[Path]:
    """Write each media/text output of ``target`` as ``<node id>.<port>.<ext>`` (a PNG with
    the recipe that made it in its ``inline`` iTXt chunk, as API takes carry it); with
    ``prefix`` (a ComfyUI ``SaveImage``'s ``filename_prefix``, from the request's
    ``outputNames``) as ComfyUI names them, ``<prefix>_00001_.<ext>`` with the next free number
    (never overwriting), ``<prefix>`` may hold subfolders. The paths written."""
    written: list[Path] = []
    safe_id = _safe(target.id)
    named = _prefixed(out_dir, prefix) if prefix else None
    media = [p for p, hv in outputs.items() if isinstance(hv.value, MediaValue | TextValue)]
    for port, hv in outputs.items():
        v = hv.value
        if isinstance(v, MediaValue):
            data = engine.read_bytes(hv)
        elif isinstance(v, TextValue):
            data = v.text.encode()
        else:
            continue
        ext = media_extension(hv)
        if ext == "png":
            data = png_with_recipe(
                data, node_id=target.id, node_type=target.type, params=target.params, graph=graph
            )
        if named is not None:
            folder, stem = named
            folder.mkdir(parents=True, exist_ok=True)
            path = _next_free(folder, stem, "" if len(media) == 1 else f".{port}", ext)
        else:
            path = out_dir / f"{safe_id}.{port}.{ext}"
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
        written.append(path)
    return written


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def _prefixed(out_dir: Path, prefix: str) -> tuple[Path, str]:
    """The folder and file stem of a ComfyUI ``filename_prefix`` under ``out_dir`` (its
    subfolders kept, ``..`` and absolute parts dropped: it never leaves ``out_dir``)."""
    parts = [_safe(p) for p in prefix.replace("\\", "/").split("/") if p not in ("", ".", "..")]
    parts = [p for p in parts if p.strip(".")] or ["ComfyUI"]
    return out_dir.joinpath(*parts[:-1]), parts[-1]


def _next_free(folder: Path, stem: str, port: str, ext: str) -> Path:
    """``<stem>_<NNNNN>_<port>.<ext>`` with the first number above every one in ``folder``."""
    used = [0]
    for p in folder.glob(f"{stem}_*_*"):
        number = p.name[len(stem) + 1 :].split("_", 1)[0]
        if number.isdigit():
            used.append(int(number))
    return folder / f"{stem}_{max(used) + 1:05}_{port}.{ext}"
