"""``inline import comfyui FILE [--out GRAPH.json] [--run] [--json] [--one-click]``.

Exit codes: 0 when every executed node mapped, 3 when some did not (the graph and report are
still written), 2 when the input is not a workflow; with ``--run``, a failed run's code.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Final

from ..comfyui import (
    ComfyImportError,
    cached_mappings,
    import_comfyui,
    registry_mappings,
    render_text,
)

EXIT_OK: Final = 0
EXIT_INVALID: Final = 2
EXIT_UNMAPPED: Final = 3


def add_import_parser(sub: Any) -> None:
    """Add ``import comfyui`` to the ``inline`` command's subparsers."""
    imp = sub.add_parser("import", help="import a workflow from another tool")
    kinds = imp.add_subparsers(dest="import_kind", required=True)
    cmd = kinds.add_parser("comfyui", help="a ComfyUI workflow: UI save, API prompt or PNG")
    cmd.add_argument("file", help="workflow .json (UI or API) or a PNG carrying one")
    cmd.add_argument(
        "--out", help="where to write the run document (default: <FILE stem>.inline.json)"
    )
    cmd.add_argument("--run", action="store_true", help="run the imported graph (as inline run)")
    cmd.add_argument("--json", action="store_true", help="print {graph, target, report} as JSON")
    cmd.add_argument(
        "--one-click",
        action="store_true",
        dest="one_click",
        help="offer a Z-Image-shaped graph as one alibaba/z-image-turbo node",
    )
    cmd.add_argument("--outputs", default="out", help="with --run: folder for the outputs")


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def run_import(args: argparse.Namespace) -> int:
    """Convert, write, report and (``--run``) run."""
    from .._settings import Settings

    source = Path(args.file)
    try:
        data = source.read_bytes()
    except OSError as exc:
        print(f"error: cannot read '{source}': {exc.strerror or exc}", file=sys.stderr)
        return EXIT_INVALID
    settings = Settings.from_env()
    if args.run:  # the run loads the registry anyway: take every registered pack's mappings
        from inline_registry import load_registry

        mappings = registry_mappings(load_registry(settings.packs_dir, settings.extra_packs))
    else:  # converting alone builds and starts nothing: the handshakes cached so far
        mappings = cached_mappings(settings.packs_dir)
    try:
        imported = import_comfyui(
            data, where=str(source), base_dir=source.resolve().parent,
            mappings=mappings, one_click_node=args.one_click,
        )  # fmt: skip
    except ComfyImportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    out = Path(args.out) if args.out else Path(f"{source.name.split('.')[0]}.inline.json")
    write_atomic(out, json.dumps(imported.document, indent=1) + "\n")
    if args.json:
        print(json.dumps(imported.to_json(), indent=1))
    else:
        print(render_text(imported.report))
        print(f"wrote {out}")
    code = EXIT_OK if imported.report.complete else EXIT_UNMAPPED
    if args.run and code != EXIT_OK:
        print(
            f"not running: the import is incomplete (see the report above); edit {out} or map "
            f"the missing nodes, then run it with: inline run {out}",
            file=sys.stderr,
        )
        return code
    if args.run:
        import anyio

        from ._run import run_graph

        run_args = argparse.Namespace(file=str(out), target=None, out=args.outputs)
        ran = anyio.run(run_graph, run_args)
        return ran or code
    return code
