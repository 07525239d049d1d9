"""``inline models import hf:ORG/NAME[@REVISION]`` and ``inline models estimate``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from inline_core import GIB

from .._settings import Settings
from ..hub import (
    CATEGORY_DIRS,
    HubError,
    PullError,
    describe,
    disk_problem,
    estimate_folder,
    estimate_plan,
    parse_source,
    pending,
    plan_import,
    resolve_token,
    run_import,
    stage_dir,
)
from ..models import budget_of


def add_import_parsers(models_sub: Any) -> None:
    """``inline models import`` and ``inline models estimate``."""
    imp = models_sub.add_parser(
        "import", help="download a Hugging Face repo into models/<category>/<name>/"
    )
    imp.add_argument("source", help="hf:ORG/NAME[@REVISION]")
    _common(imp)
    imp.add_argument("--include", action="append", default=[], metavar="GLOB",
                     help="only files matching GLOB (repeatable)")  # fmt: skip
    imp.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                     help="also skip files matching GLOB (repeatable)")  # fmt: skip
    imp.add_argument("--dry-run", action="store_true", help="list what would be fetched, where")
    imp.add_argument("--json", action="store_true", help="print the plan as JSON (--dry-run)")
    est = models_sub.add_parser(
        "estimate", help="parameters, bytes per dtype and fit of a repo or folder (no download)"
    )
    est.add_argument("source", help="hf:ORG/NAME[@REVISION] or a local folder")
    _common(est)
    est.add_argument("--include", action="append", default=[], metavar="GLOB")
    est.add_argument("--exclude", action="append", default=[], metavar="GLOB")
    est.add_argument("--profile", choices=("gpu-max", "lowvram", "cpu"))
    est.add_argument("--json", action="store_true", help="print the estimate as JSON")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--as", dest="category", choices=tuple(CATEGORY_DIRS),
                   help="the kind of model (inferred from the repo when absent)")  # fmt: skip
    p.add_argument("--token-secret", metavar="NAME",
                   help="the secret holding a Hub token (else HF_TOKEN)")  # fmt: skip


def run_import_command(args: argparse.Namespace) -> int:
    """Run ``inline models import|estimate``; the exit code."""
    settings = Settings.from_env()
    budget = budget_of(settings)
    try:
        if args.models_command == "estimate" and not args.source.startswith("hf:"):
            answer = estimate_folder(
                Path(args.source), args.category, profile=args.profile, budget=budget
            )
            return _print_estimate(answer, args.json)
        source = parse_source(args.source)
        token = resolve_token(settings.data_dir, args.token_secret)
        plan = plan_import(source, settings.models_dir, category=args.category,
                           include=args.include, exclude=args.exclude, token=token,
                           ignores=settings.hf_ignore, timeout=settings.hub_timeout)  # fmt: skip
        if args.models_command == "estimate":
            answer = estimate_plan(plan, profile=args.profile, budget=budget)
            return _print_estimate(answer, args.json)
        return _import(plan, settings.models_dir, dry_run=args.dry_run, as_json=args.json)
    except (HubError, PullError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _import(plan: Any, models_dir: Path, *, dry_run: bool, as_json: bool) -> int:
    todo = {f.path for f in pending(plan, models_dir)}
    say = sys.stderr
    say.write(f"{plan.source} @ {plan.commit[:12]}: {plan.category} -> {plan.dest}\n")
    for f in plan.files:
        state = "would fetch" if dry_run else "fetching"
        size = f" ({f.size / 1e6:.1f} MB)" if f.size else ""
        say.write(f"  {f.path}{size} [{state if f.path in todo else 'present'}]\n")
    if plan.skipped:
        say.write(f"  skipped by the ignore patterns: {', '.join(plan.skipped)}\n")
    if dry_run:
        if as_json:
            print(json.dumps(describe(plan) | {"missing": sorted(todo)}, indent=2))
        return 0
    if not todo and plan.dest.is_dir():
        say.write(f"All files of {plan.source} are present in {plan.dest}.\n")
        print(plan.dest)
        return 0
    try:
        print(run_import(plan, models_dir))
    except (PullError, OSError) as exc:
        if isinstance(exc, OSError):  # moving the finished folder into place: a full disk...
            exc = PullError(disk_problem(exc, Path(exc.filename or plan.dest)))
        print(f"error: {exc}", file=sys.stderr)
        print(f"Run the command again to resume ({stage_dir(plan, models_dir)}).",
              file=sys.stderr)  # fmt: skip
        return 1
    return 0


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
