"""``inline models import SOURCE`` and ``inline models estimate SOURCE``, through the importer
objects (``inline_host.importers``): the Python API and the CLI give the same answers."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from inline_core import GIB

from .._settings import Settings
from ..hub import CATEGORY_DIRS, PullError, describe, disk_problem
from ..importers import (
    FileProgress,
    HubError,
    HuggingFaceImporter,
    Importer,
    SourceError,
    importer_for,
)
from ..models import budget_of
from ._run import EXIT_FAILED, EXIT_INVALID

SOURCES_HELP = (
    "hf:ORG/NAME[@REVISION], url:https://.../model.safetensors, file:/path/to/folder, or a "
    "plugin's PREFIX:MODEL (inline models sources)"
)


def add_import_parsers(models_sub: Any) -> None:
    """``inline models import``, ``estimate`` and ``sources``."""
    imp = models_sub.add_parser(
        "import", help="fetch a model into models/<category>/<name>/ and write its card"
    )
    imp.add_argument("source", help=SOURCES_HELP)
    _common(imp)
    imp.add_argument("--include", action="append", default=[], metavar="GLOB",
                     help="only files matching GLOB (repeatable; hf:)")  # fmt: skip
    imp.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                     help="also skip files matching GLOB (repeatable; hf:)")  # fmt: skip
    imp.add_argument("--dry-run", action="store_true", help="list what would be fetched, where")
    imp.add_argument("--json", action="store_true", help="print the plan as JSON (--dry-run)")
    est = models_sub.add_parser(
        "estimate", help="parameters, bytes per dtype and fit of a model (nothing is fetched)"
    )
    est.add_argument("source", help=SOURCES_HELP + ", or a local folder")
    _common(est)
    est.add_argument("--include", action="append", default=[], metavar="GLOB")
    est.add_argument("--exclude", action="append", default=[], metavar="GLOB")
    est.add_argument("--profile", choices=("gpu-max", "lowvram", "cpu"))
    est.add_argument("--json", action="store_true", help="print the estimate as JSON")
    models_sub.add_parser("sources", help="the sources models import from (prefixes)")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--category", choices=tuple(CATEGORY_DIRS),
                   help="the kind of model (inferred from the source when absent)")  # fmt: skip
    p.add_argument("--as", dest="alias", metavar="NAME",
                   help="the model's folder name, so its id: models/<category>/NAME/ (default: "
                        "the source's name); a category word here is read as --category, as "
                        "older scripts wrote it")  # fmt: skip
    p.add_argument("--token-secret", metavar="NAME",
                   help="hf: the secret holding a Hub token (else HF_TOKEN)")  # fmt: skip


def importer_of(args: argparse.Namespace, settings: Settings) -> Importer:
    """The importer the command line names (a bare path is a ``file:`` source)."""
    source = args.source
    if ":" not in source.split("/", 1)[0] and (source.startswith((".", "/", "~")) or
                                               Path(source).exists()):  # fmt: skip
        source = f"file:{source}"
    category, alias = args.category, args.alias
    if alias in CATEGORY_DIRS and category is None:  # `--as llm`: the category, as before
        category, alias = alias, None
    kw: dict[str, Any] = {"task": category, "settings": settings, "alias": alias}
    if source.startswith("hf:"):
        kw |= {"include": args.include, "exclude": args.exclude,
               "token_secret": args.token_secret}  # fmt: skip
    elif args.include or args.exclude or args.token_secret:
        raise SourceError("--include, --exclude and --token-secret are for hf: sources")
    return importer_for(source, **kw)


def run_import_command(args: argparse.Namespace) -> int:
    """Run ``inline models import|estimate``; the exit code: 2 for a source that names nothing
    importable, 1 for a failure along the way."""
    settings = Settings.from_env()
    try:
        imp = importer_of(args, settings)
        if args.models_command == "estimate":
            answer = imp.estimate(profile=args.profile, budget=budget_of(settings))
            return _print_estimate(answer, args.json)
        return _import(imp, dry_run=args.dry_run, as_json=args.json)
    except SourceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except (HubError, PullError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED


def run_sources() -> int:
    from ..importers import importers

    for prefix, cls in sorted(importers().items()):
        print(f"{prefix + ':':<10} {cls.about or cls.__name__}")
    return 0


def _plan_json(imp: Importer, missing: set[str]) -> dict[str, Any]:
    if isinstance(imp, HuggingFaceImporter):
        return describe(imp.plan) | {"missing": sorted(missing)}
    files = imp.files()
    return {"source": imp.source, "category": imp.category, "dest": str(imp.dest),
            "files": [{"path": f.path, "size": f.size} for f in files], "skipped": [],
            "bytes": sum(f.size or 0 for f in files), "missing": sorted(missing)}  # fmt: skip


def _import(imp: Importer, *, dry_run: bool, as_json: bool) -> int:
    imp.check()
    files = imp.files()
    todo = {f.path for f in imp.missing()}
    say = sys.stderr
    commit = f" @ {imp.commit[:12]}" if isinstance(imp, HuggingFaceImporter) else ""
    say.write(f"{imp.source}{commit}: {imp.category} -> {imp.dest}\n")
    for f in files:
        state = "would fetch" if dry_run else "fetching"
        size = f" ({f.size / 1e6:.1f} MB)" if f.size else ""
        say.write(f"  {f.path}{size} [{state if f.path in todo else 'present'}]\n")
    if isinstance(imp, HuggingFaceImporter) and imp.plan.skipped:
        say.write(f"  skipped by the ignore patterns: {', '.join(imp.plan.skipped)}\n")
    if dry_run:
        if as_json:
            print(json.dumps(_plan_json(imp, todo), indent=2))
        return 0
    if not todo and imp.dest.is_dir():
        say.write(f"All files of {imp.source} are present in {imp.dest}.\n")
        imp.fetch()  # writes (or refreshes) the card, fetches nothing
        print(imp.dest)
        return 0
    try:
        print(imp.fetch(progress=_progress))
    except (PullError, OSError) as exc:
        if isinstance(exc, OSError):  # moving the finished folder into place: a full disk...
            exc = PullError(disk_problem(exc, Path(exc.filename or imp.dest)))
        print(f"error: {exc}", file=sys.stderr)
        print(f"Run the command again to resume ({imp.stage()}).", file=sys.stderr)
        return EXIT_FAILED
    except HubError as exc:
        if isinstance(exc, SourceError):
            raise
        print(f"error: {exc}", file=sys.stderr)
        print(f"Run the command again to resume ({imp.stage()}).", file=sys.stderr)
        return EXIT_FAILED
    return 0


def _progress(p: FileProgress) -> None:
    if p.done == 0 or (p.total is not None and p.done >= p.total):
        state = "done" if p.done else "start"
        sys.stderr.write(f"  [{p.index + 1}/{p.count}] {p.path}: {state}\n")


def _print_estimate(answer: dict[str, Any], as_json: bool) -> int:
    if as_json:
        print(json.dumps(answer, indent=2))
        return 0
    out = sys.stdout
    out.write(f"{answer['source']}: {answer['category']}, {answer['params']:,} parameters, "
              f"{answer['bytes'] / GIB:.2f} GiB of weights\n")  # fmt: skip
    for dtype, n in sorted(answer["paramsByDtype"].items()):
        out.write(f"  {dtype}: {n:,} params, {answer['bytesByDtype'][dtype] / GIB:.3f} GiB\n")
    r = answer["replica"]
    out.write(f"one replica ({r['dtype']}): {r['vramGb']} GB VRAM, {r['ramGb']} GB RAM, "
              f"{r['gpus']} GPU\n")  # fmt: skip
    fit = answer["fit"]
    out.write(("fits here: " if fit["fits"] else "won't fit here: ") + str(fit["reason"]) + "\n")
    return 0
