"""``inline models pull NODE``: fetch the model files a node's manifest recommends.

Files come from the Hub with huggingface_hub into the models dir (ComfyUI layout), never into
the hidden HF cache: each download lands in ``models/.downloads/<repo>/`` (where an interrupted
one resumes), its size is verified, then it is moved into place atomically. Only an explicit
command downloads; a render never does.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inline_registry import ModelFile, RegistryError, pack_sources, read_manifest

from .._settings import Settings
from ..models._catalogs import UnsafeName, check_name
from ..models._fit import add_fit_parser, run_fit

STAGING = ".downloads"


@dataclass(frozen=True, slots=True)
class Fetch:
    """One file to fetch: from ``repo``/``path`` to ``dest``, ``size`` bytes if known."""

    label: str
    repo: str
    path: str
    revision: str
    dest: Path
    size: int | None


class PullError(Exception):
    """A file could not be fetched or verified."""


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


def node_models(node_type: str) -> tuple[ModelFile, ...]:
    """The model files the manifest of ``node_type``'s pack lists (no venv needed)."""
    known: list[str] = []
    for source in pack_sources():
        manifest = read_manifest(source.path)
        node = manifest.nodes.get(node_type)
        if node is not None:
            return node.models
        known.extend(t for t, n in manifest.nodes.items() if n.models)
    hint = f" (nodes with model files: {', '.join(sorted(known))})" if known else ""
    raise PullError(f"no installed pack declares model files for '{node_type}'{hint}")


def plan_fetches(
    models: tuple[ModelFile, ...], models_dir: Path, *, everything: bool
) -> list[Fetch]:
    """What to fetch: each file (or each file of a folder entry) with a repo, required unless
    ``everything``."""
    fetches: list[Fetch] = []
    for m in models:
        if m.repo is None or m.path is None or not (m.required or everything):
            continue
        try:
            check_name(m.file)
        except UnsafeName as exc:
            raise PullError(f"manifest entry '{m.label}': {exc}") from None
        dest = models_dir / m.category / m.file
        revision = m.revision or "main"
        if m.files:
            for name in m.files:
                repo_path = f"{m.path.rstrip('/')}/{name}"
                fetches.append(Fetch(f"{m.label} ({name})", m.repo, repo_path, revision,
                                     dest / name, None))  # fmt: skip
        else:
            fetches.append(Fetch(m.label, m.repo, m.path, revision, dest, m.size))
    return fetches


def _present(f: Fetch) -> bool:
    return f.dest.is_file() and (f.size is None or f.dest.stat().st_size == f.size)


def fetch(f: Fetch, models_dir: Path) -> Path:
    """Download one file into the staging folder (resuming), verify its size, move it in place."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url
    from huggingface_hub.errors import HfHubHTTPError

    staging = models_dir / STAGING / f.repo.replace("/", "--")
    try:
        meta = get_hf_file_metadata(hf_hub_url(f.repo, f.path, revision=f.revision))
        expected = f.size if f.size is not None else meta.size
        if f.size is not None and meta.size is not None and meta.size != f.size:
            raise PullError(
                f"{f.repo}/{f.path}: the Hub serves {meta.size} bytes, the manifest expects "
                f"{f.size}: not the expected file"
            )
        free = shutil.disk_usage(models_dir).free
        if expected is not None and expected > free:
            raise PullError(f"{f.label} needs {expected / 1e9:.1f} GB, {free / 1e9:.1f} GB free")
        local = Path(hf_hub_download(f.repo, f.path, revision=f.revision, local_dir=str(staging)))
    except HfHubHTTPError as exc:
        raise PullError(f"cannot fetch {f.repo}/{f.path}: {exc}") from None
    except OSError as exc:  # connection refused, timeouts (httpx errors derive from neither)
        raise PullError(f"cannot fetch {f.repo}/{f.path}: {exc}") from None
    got = local.stat().st_size
    if expected is not None and got != expected:
        local.unlink(missing_ok=True)
        raise PullError(
            f"{f.repo}/{f.path}: downloaded {got} bytes, expected {expected}; removed it, "
            "run the command again"
        )
    f.dest.parent.mkdir(parents=True, exist_ok=True)
    os.replace(local, f.dest)
    return f.dest


def run_models(args: argparse.Namespace) -> int:
    """Run ``inline models ...``; the exit code."""
    if args.models_command == "fit":
        return run_fit(args)
    if args.models_command != "pull":
        return 2
    models_dir = Settings.from_env().models_dir
    try:
        fetches = plan_fetches(node_models(args.node), models_dir, everything=args.all)
    except (PullError, RegistryError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    todo = [f for f in fetches if not _present(f)]
    for f in fetches:
        state = "present" if f not in todo else ("would fetch" if args.dry_run else "fetching")
        size = f" ({f.size / 1e9:.2f} GB)" if f.size else ""
        print(f"{f.label}: {f.repo}/{f.path} -> {f.dest}{size} [{state}]", file=sys.stderr)
    if args.dry_run or not todo:
        if not todo:
            print(f"All model files of {args.node} are present in {models_dir}.", file=sys.stderr)
        return 0
    models_dir.mkdir(parents=True, exist_ok=True)
    failed = 0
    for f in todo:
        try:
            print(fetch(f, models_dir))
        except PullError as exc:
            failed += 1
            print(f"error: {exc}", file=sys.stderr)
    if failed:
        print(f"Run the command again to resume ({models_dir / STAGING}).", file=sys.stderr)
        return 1
    shutil.rmtree(models_dir / STAGING, ignore_errors=True)
    return 0
