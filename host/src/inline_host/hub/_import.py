"""Running an import: fetch each file of the plan (staged, resumable across processes, size-
and hash-verified, as ``inline models pull`` does), then move the finished folder into
``models/<category>/<name>/``."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from ._card import card_after_import
from ._hf import ImportPlan, source_record
from ._pull import STAGING, Fetch, PullError, fetch, staging_dir
from ._transfer import release_staging

SOURCE_FILE = ".inline-source.json"


def stage_dir(plan: ImportPlan, models_dir: Path) -> Path:
    """Where an import's verified files wait until all of them are there."""
    return models_dir / STAGING / "imports" / f"{plan.dest.parent.name}--{plan.dest.name}"


def raw_staging(repo: str, models_dir: Path) -> Path:
    """Where a repo's partial downloads are staged (``<path>.<etag>.incomplete``, kept across
    processes so that the next run resumes them)."""
    return staging_dir(repo, models_dir)


def _has(path: Path, size: int | None) -> bool:
    return path.is_file() and (size is None or path.stat().st_size == size)


def pending(plan: ImportPlan, models_dir: Path) -> list[Fetch]:
    """The plan's files not yet in place (nor already verified in the stage)."""
    stage = stage_dir(plan, models_dir)
    return [
        f
        for f in plan.fetches(stage)
        if not _has(plan.dest / f.path, f.size) and not _has(f.dest, f.size)
    ]


def run_import(
    plan: ImportPlan, models_dir: Path, say: Callable[[str], None] = lambda _: None
) -> Path:
    """Fetch what is missing and move it into ``plan.dest``; the folder. Raises ``PullError``
    on the first file that cannot be fetched (what was fetched stays staged, to resume)."""
    todo = pending(plan, models_dir)
    if todo:
        models_dir.mkdir(parents=True, exist_ok=True)
        for f in todo:
            say(f"fetching {f.path}" + (f" ({f.size / 1e6:.1f} MB)" if f.size else ""))
            fetch(f, models_dir, token=plan.token, timeout=plan.timeout)
    finalize(plan, models_dir)
    release_staging(raw_staging(plan.source.repo, models_dir))
    return plan.dest


def finalize(plan: ImportPlan, models_dir: Path) -> None:
    """Move the staged files into place: a whole new folder in one rename, or file by file
    into an existing one (an update); then record the source, and on the model's card what one
    replica of it needs (the estimate; values someone edited there stay)."""
    stage = stage_dir(plan, models_dir)
    if not stage.is_dir():
        if not plan.dest.is_dir():
            raise PullError(f"{plan.source}: nothing staged in {stage}")
    elif not plan.dest.exists():
        plan.dest.parent.mkdir(parents=True, exist_ok=True)
        _write_record(plan, stage)
        os.replace(stage, plan.dest)
        _card(plan)
        return
    else:
        for path in sorted(p for p in stage.rglob("*") if p.is_file()):
            target = plan.dest / path.relative_to(stage)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, target)
        shutil.rmtree(stage, ignore_errors=True)
    _write_record(plan, plan.dest)
    _card(plan)


def _card(plan: ImportPlan) -> None:
    card_after_import(plan.dest, f"hf:{plan.source.repo}", plan.source.revision, plan.category)


def _write_record(plan: ImportPlan, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{SOURCE_FILE}.tmp"
    tmp.write_text(source_record(plan))
    os.replace(tmp, folder / SOURCE_FILE)
