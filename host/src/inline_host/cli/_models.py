"""``inline models ...``: pull a node's model files, fit, import and estimate; list, show and
remove the models of this machine."""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any

from inline_registry import RegistryError

from .._settings import Settings
from ..hub import (
    STAGING,
    PullError,
    fetch,
    is_present,
    node_models,
    plan_fetches,
    release_staging,
    staging_dir,
)
from ._fit import add_fit_parser, run_fit
from ._import import add_import_parsers, run_import_command, run_sources
from ._local import add_local_parsers, run_local


def add_models_parser(subparsers: Any) -> None:
    """Add ``inline models ...`` to the CLI's subcommands."""
    models = subparsers.add_parser("models", help="fetch the model files nodes need")
    sub = models.add_subparsers(dest="models_command", required=True)
    pull = sub.add_parser(
        "pull", help="download a node's missing recommended model files into the models dir"
    )
    pull.add_argument("node", help="node type, e.g. alibaba/z-image-turbo")
    pull.add_argument("--all", action="store_true", help="also fetch optional files")
    pull.add_argument("--dry-run", action="store_true", help="only list what would be fetched")
    add_fit_parser(sub)
    add_import_parsers(sub)
    add_local_parsers(sub)


def run_models(args: argparse.Namespace) -> int:
    """Run ``inline models ...``; the exit code."""
    if args.models_command == "fit":
        return run_fit(args)
    if args.models_command in ("import", "estimate"):
        return run_import_command(args)
    if args.models_command == "sources":
        return run_sources()
    if args.models_command in ("list", "show", "remove"):
        return run_local(args)
    if args.models_command != "pull":
        return 2
    settings = Settings.from_env()
    models_dir = settings.models_dir
    try:
        fetches = plan_fetches(node_models(args.node), models_dir, everything=args.all)
    except (PullError, RegistryError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    todo = [f for f in fetches if not is_present(f)]
    plan_out = sys.stdout if args.dry_run else sys.stderr  # a dry run's plan is its output
    for f in fetches:
        state = "present" if f not in todo else ("would fetch" if args.dry_run else "fetching")
        size = f" ({f.size / 1e9:.2f} GB)" if f.size else ""
        print(f"{f.label}: {f.repo}/{f.path} -> {f.dest}{size} [{state}]", file=plan_out)
    if args.dry_run or not todo:
        if not todo:
            print(f"All model files of {args.node} are present in {models_dir}.", file=sys.stderr)
        return 0
    models_dir.mkdir(parents=True, exist_ok=True)
    failed = 0
    for f in todo:
        try:
            print(fetch(f, models_dir, timeout=settings.hub_timeout))
        except PullError as exc:
            print(f"error: {exc}", file=sys.stderr)
            if exc.unreachable:
                return 1  # the other files would fail alike: one line is the whole story
            failed += 1
    if failed:
        print(f"Run the command again to resume ({models_dir / STAGING}).", file=sys.stderr)
        return 1
    for repo in {f.repo for f in todo}:
        release_staging(staging_dir(repo, models_dir))  # unless another download stages there
    with contextlib.suppress(OSError):
        (models_dir / STAGING).rmdir()
    return 0
