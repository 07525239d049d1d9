"""Fetching the model files a node's manifest recommends (``inline models pull``, downloads).

Files come from the Hub into the models dir (ComfyUI layout), never into the hidden HF cache:
each download is staged in ``models/.downloads/<repo>/`` under a name every process computes
alike, so an interrupted one, even a killed process's, resumes from its staged bytes (see
``_transfer``); its size and hash are verified, then it is moved into place atomically. Only an
explicit command downloads; a render never does.
"""

from __future__ import annotations

import errno
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from urllib.parse import quote

from inline_registry import ModelFile, pack_sources, read_manifest

from ..models import UnsafeName, check_name
from ._transfer import (
    Digest,
    TransferError,
    check,
    claim,
    disk_problem,
    drop_other_versions,
    expected_digest,
    stage_file,
    transfer,
)

STAGING = ".downloads"


@dataclass(frozen=True, slots=True)
class Fetch:
    """One file to fetch: from ``repo``/``path`` to ``dest``, ``size`` bytes if known, with the
    ``sha256`` the Hub's tree gives an LFS file (else the ETag's hash is checked)."""

    label: str
    repo: str
    path: str
    revision: str
    dest: Path
    size: int | None
    sha256: str | None = None


class PullError(Exception):
    """A file could not be fetched or verified; ``unreachable`` when the Hub could not be
    reached at all (then the other files would fail alike)."""

    def __init__(self, message: str, *, unreachable: bool = False) -> None:
        self.unreachable = unreachable
        super().__init__(message)


#: Where the network and HTTP errors of a download come from (huggingface_hub speaks httpx).
NETWORK_MODULES = frozenset(
    {"httpx", "httpx2", "httpcore", "huggingface_hub", "requests", "urllib3"}
)


def hub_endpoint() -> str:
    """The Hub the downloads go to (``HF_ENDPOINT``, else huggingface.co)."""
    from huggingface_hub import constants

    return str(constants.ENDPOINT)


def unreachable(f: Fetch, exc: BaseException) -> PullError:
    """One line: what was tried where, how to use a mirror, and that the command resumes."""
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return PullError(
        f"cannot reach {hub_endpoint()} to fetch {f.repo}/{f.path} ({type(exc).__name__}: "
        f"{reason}); point HF_ENDPOINT at a mirror (HF_ENDPOINT=https://your-mirror inline "
        "models pull ...) or retry when online: the command resumes where it stopped",
        unreachable=True,
    )


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
                if not safe_relative(name):
                    raise PullError(f"manifest entry '{m.label}': '{name}' is not a file name "
                                    "inside its folder")  # fmt: skip
                repo_path = f"{m.path.rstrip('/')}/{name}"
                fetches.append(Fetch(f"{m.label} ({name})", m.repo, repo_path, revision,
                                     dest / name, None))  # fmt: skip
        else:
            fetches.append(Fetch(m.label, m.repo, m.path, revision, dest, m.size))
    return fetches


def safe_relative(path: str) -> bool:
    """Whether ``path`` (a repo's or a manifest's ``a/b/c``) stays inside the folder it is
    joined to: relative, no ``..`` or empty part, no backslash or control character."""
    parts = path.split("/")
    return (
        bool(path)
        and not path.startswith("/")
        and all(p not in ("", ".", "..") for p in parts)
        and not any(c == "\\" or ord(c) < 32 for c in path)
    )


#: Seconds a Hub request may go without a byte, unless the caller passes the settings'
#: ``INLINE_HUB_TIMEOUT`` (the top always does).
HUB_TIMEOUT: Final = 60.0


def is_present(f: Fetch) -> bool:
    return f.dest.is_file() and (f.size is None or f.dest.stat().st_size == f.size)


def staging_dir(repo: str, models_dir: Path) -> Path:
    """Where a repo's downloads are staged (``<path>.<etag>.incomplete``, ``<path>.lock``)."""
    return models_dir / STAGING / repo.replace("/", "--")


def resolve_url(f: Fetch) -> str:
    """The Hub address of ``f`` (``HF_ENDPOINT`` honoured)."""
    return f"{hub_endpoint()}/{f.repo}/resolve/{quote(f.revision, safe='')}/{quote(f.path)}"


def _tell(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def fetch(
    f: Fetch,
    models_dir: Path,
    *,
    token: str | None = None,
    say: Callable[[str], None] = _tell,
    timeout: float = HUB_TIMEOUT,
) -> Path:
    """Download one file into its stage (resuming what is staged, from any earlier process),
    verify its size and hash, move it in place; ``f.dest``. ``say`` hears about resumes,
    restarts and a corrupted stage; every read waits ``timeout`` seconds for a byte at most
    (``INLINE_HUB_TIMEOUT``)."""
    from huggingface_hub import get_hf_file_metadata
    from huggingface_hub.errors import HfHubHTTPError
    from huggingface_hub.utils import build_hf_headers

    staging = staging_dir(f.repo, models_dir)
    what = f"{f.repo}/{f.path}"
    wait = timeout
    if not safe_relative(f.path):
        raise PullError(f"{what}: not a file name inside the repo: refused")
    try:
        url = resolve_url(f)
        meta = get_hf_file_metadata(url, token=token, timeout=wait)
        expected = f.size if f.size is not None else meta.size
        if f.size is not None and meta.size is not None and meta.size != f.size:
            raise PullError(
                f"{what}: the Hub serves {meta.size} bytes, the manifest expects "
                f"{f.size}: not the expected file"
            )
        part = stage_file(staging, f.path, meta.etag)
        with claim(staging, f.path, what):
            if dropped := drop_other_versions(staging, f.path, part):
                say(f"{what}: dropped {dropped} staged bytes of another version")
            _room(f, models_dir, expected, part)
            headers = build_hf_headers(token=token)  # httpx drops it on a redirect elsewhere
            _download(url, part, expected, expected_digest(meta.etag, f.sha256),
                      headers, what, say, wait)  # fmt: skip
            try:
                f.dest.parent.mkdir(parents=True, exist_ok=True)
                os.replace(part, f.dest)
            except OSError as exc:
                raise TransferError(disk_problem(exc, f.dest)) from None
    except HfHubHTTPError as exc:  # the Hub answered: a missing file, a gated repo...
        status = getattr(getattr(exc, "response", None), "status_code", None)
        kind = f"HTTP {status}" if status else type(exc).__name__
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else kind
        raise PullError(f"cannot fetch {what} from {hub_endpoint()}: {first}") from None
    except TransferError as exc:
        raise PullError(str(exc)) from None
    except PullError:
        raise
    except Exception as exc:  # connection refused, DNS, timeouts: every network error class
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
            where = Path(exc.filename) if exc.filename else models_dir / "x"
            raise PullError(disk_problem(exc, where)) from None
        if isinstance(exc, OSError) or type(exc).__module__.split(".")[0] in NETWORK_MODULES:
            raise unreachable(f, exc) from None
        raise
    return f.dest


def _room(f: Fetch, models_dir: Path, expected: int | None, part: Path) -> None:
    left = (expected or 0) - (part.stat().st_size if part.is_file() else 0)
    free = shutil.disk_usage(models_dir).free
    if left > free:
        raise PullError(
            f"the disk is full for {f.label}: it needs {left / 1e9:.1f} GB more in "
            f"{models_dir}, {free / 1e9:.1f} GB are free"
        )


def _download(
    url: str,
    part: Path,
    size: int | None,
    digest: Digest | None,
    headers: dict[str, str],
    what: str,
    say: Callable[[str], None],
    timeout: float,
) -> None:
    """Transfer into ``part`` and verify it; a stage that fails the check is deleted, and one
    that was resumed is fetched once more from zero (its old bytes may be what was wrong). A
    file whose size nothing declared and whose hash is unknown is refused: it may be cut
    short."""
    from huggingface_hub.utils import tqdm

    resumed = part.is_file() and part.stat().st_size > 0
    while True:
        start = part.stat().st_size if part.is_file() else 0
        with tqdm(total=size, initial=start, unit="B", unit_scale=True, unit_divisor=1024,
                  desc=what.rsplit("/", 1)[-1][-40:]) as bar:  # fmt: skip
            declared = transfer(url, part, size=size, headers=headers, what=what, say=say,
                                timeout=timeout,
                                progress=lambda done: bar.update(done - bar.n))  # fmt: skip
        if declared is None and digest is None:
            part.unlink(missing_ok=True)
            raise TransferError(
                f"{what}: the server declared neither its size (no Content-Length) nor a hash "
                "(no ETag, no LFS sha256), so a cut-short file cannot be told from a whole one: "
                "refused; use a server that declares them"
            )
        problem = check(part, declared, digest)
        if problem is None:
            return
        part.unlink(missing_ok=True)
        if not resumed:
            raise TransferError(f"{what}: {problem}; removed it, run the command again")
        say(f"{what}: {problem}; removed the staged bytes, downloading it again from zero")
        resumed = False
