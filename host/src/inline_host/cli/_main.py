"""The ``inline`` command: every subcommand's parser and where it goes (each is a module here)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import NoReturn

import anyio
from inline_registry import RegistryError

from .._errors import InlineHostError
from .._settings import Settings
from ..assets import AssetRefused, sniff_kind
from ..runs import BlobStore
from ._comfyui import add_import_parser, run_import
from ._demo import add_demo_parser, run_demo
from ._deploy import add_deploy_parsers, run_deploy
from ._models import add_models_parser, run_models
from ._nodes import add_nodes_parser, run_nodes
from ._packs import add_pack_parser, run_pack
from ._run import EXIT_FAILED, run_graph
from ._secrets import add_secrets_parser, run_secrets
from ._serve import add_server_flags, run_server
from ._version import VersionAction


def _assets_add(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    store = BlobStore(settings.blobs_dir)
    path = Path(args.file)
    try:
        with path.open("rb") as fh:
            sniff_kind(fh.read(64), what="the file", hint="")  # the API's rules
        bid = store.put_file(path)
    except AssetRefused as exc:
        print(f"error: {path}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as exc:
        print(f"error: cannot read {path}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAILED
    except InlineHostError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(bid)
    return 0


class _Parser(argparse.ArgumentParser):
    """A parser whose mistakes are one line (the usage is a ``--help`` away); subcommands'
    parsers are of this class too."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    parser = _Parser(prog="inline", description="Inline generation engine")
    parser.add_argument("--version", action=VersionAction)
    parser.add_argument(
        "--debug",
        action="store_true",
        help="show remote tracebacks for every error (also INLINE_DEBUG=1)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="validate and run a graph file {graph, target}")
    run.add_argument("file", help='JSON run request: {"graph": ..., "target": ...}')
    run.add_argument("--target", help="node id to produce (overrides the file's target)")
    run.add_argument("--out", default="out", help="folder for the target's outputs (default: out)")
    run.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="remote tracebacks too"
    )
    assets = sub.add_parser("assets", help="manage input assets")
    assets_sub = assets.add_subparsers(dest="assets_command", required=True)
    add = assets_sub.add_parser("add", help="store a file; prints its asset id")
    add.add_argument("file")
    add_models_parser(sub)
    add_nodes_parser(sub)
    add_pack_parser(sub)
    add_import_parser(sub)
    add_secrets_parser(sub)
    add_deploy_parsers(sub)
    add_demo_parser(sub)
    serve = sub.add_parser(
        "serve", help="serve /v1 (the same server as python -m inline_host and main.py)"
    )
    add_server_flags(serve)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``inline`` command."""
    args = build_parser().parse_args(argv)
    try:
        if args.command == "run":
            return anyio.run(run_graph, args)
        if args.command == "assets" and args.assets_command == "add":
            return _assets_add(args)
        if args.command == "models":
            return run_models(args)
        if args.command == "pack":
            return run_pack(args)
        if args.command == "import":
            return run_import(args)
        if args.command == "secrets":
            return run_secrets(args)
        if args.command == "nodes":
            return run_nodes(args)
        if args.command == "serve":
            return run_server(args)
        if args.command == "demo":
            return run_demo(args)
        if args.command in ("deploy", "undeploy", "deployments"):
            return run_deploy(args)
    except RegistryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug of ours: one line, the traceback with --debug
        if getattr(args, "debug", False) or os.environ.get("INLINE_DEBUG") == "1":
            raise
        print(
            f"error: {type(exc).__name__}: {exc} (a bug in Inline: run again with --debug "
            "for the traceback, and report it)",
            file=sys.stderr,
        )
        return EXIT_FAILED
    return EXIT_FAILED


if __name__ == "__main__":
    raise SystemExit(main())
