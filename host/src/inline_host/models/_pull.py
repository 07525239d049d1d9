"""Fetching the model files a node's manifest recommends (``inline models pull``, downloads).

Files come from the Hub with huggingface_hub into the models dir (ComfyUI layout), never into
the hidden HF cache: each download lands in ``models/.downloads/<repo>/`` (where an interrupted
one resumes), its size is verified, then it is moved into place atomically. Only an explicit
command downloads; a render never does.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inline_registry import ModelFile, RegistryError, pack_sources, read_manifest

from ._catalogs import UnsafeName, check_name

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


def fetch(f: Fetch, models_dir: Path, *, token: str | None = None) -> Path:
    """Download one file into the staging folder (resuming), verify its size, move it in place."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url
    from huggingface_hub.errors import HfHubHTTPError

    staging = models_dir / STAGING / f.repo.replace("/", "--")
    try:
        meta = get_hf_file_metadata(hf_hub_url(f.repo, f.path, revision=f.revision), token=token)
        expected = f.size if f.size is not None else meta.size
        if f.size is not None and meta.size is not None and meta.size != f.size:
            raise PullError(
                f"{f.repo}/{f.path}: the Hub serves {meta.size} bytes, the manifest expects "
                f"{f.size}: not the expected file"
            )
        free = shutil.disk_usage(models_dir).free
        if expected is not None and expected > free:
            raise PullError(f"{f.label} needs {expected / 1e9:.1f} GB, {free / 1e9:.1f} GB free")
        local = Path(
            hf_hub_download(
                f.repo, f.path, revision=f.revision, local_dir=str(staging), token=token
            )
        )
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


