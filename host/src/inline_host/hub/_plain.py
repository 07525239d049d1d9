"""Plain sources' I/O: a safetensors file at a URL (its size from a HEAD, its header from one
or two ranged reads, its bytes by the same resumable transfer the Hub's files use) and a local
folder (its files, headers read in place, copied with resume)."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final
from urllib.parse import unquote, urlsplit

from ._estimate import FileCount, by_size, count_header, remote_header
from ._hf import DEFAULT_IGNORE, WEIGHT_SUFFIXES, HubError, SourceError, matches
from ._pull import HUB_TIMEOUT
from ._transfer import TransferError, claim, disk_problem, transfer

_COPY_CHUNK: Final = 8 << 20


def check_url(url: str) -> str:
    """The file name a safetensors URL ends with; ``SourceError`` for another URL."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise SourceError(f"url:{url}: not an http(s) URL (url:https://HOST/PATH.safetensors)")
    name = unquote(parts.path.rsplit("/", 1)[-1])
    if not name.endswith(".safetensors") or name == ".safetensors" or "\\" in name:
        raise SourceError(
            f"url:{url}: not a safetensors file (the URL must end in .safetensors): only "
            "safetensors can be sized before the download and loaded without running its code"
        )
    return name


def _network(url: str, exc: BaseException) -> HubError:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return HubError(f"url:{url}: cannot reach the server: {type(exc).__name__}: {first}")


@contextlib.contextmanager
def _guard(url: str) -> Iterator[None]:
    from huggingface_hub.errors import HfHubHTTPError

    try:
        yield
    except HfHubHTTPError as exc:
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if status == 404:
            raise SourceError(f"url:{url}: the server has no such file (HTTP 404)") from None
        raise HubError(f"url:{url}: the server answered HTTP {status}") from None
    except (HubError, TransferError):
        raise
    except Exception as exc:
        if isinstance(exc, OSError) or type(exc).__module__.split(".")[0].startswith("http"):
            raise _network(url, exc) from None
        raise


def url_size(url: str, timeout: float = HUB_TIMEOUT) -> int | None:
    """The file's size from a HEAD (None when the server tells none)."""
    from huggingface_hub.utils import get_session, hf_raise_for_status

    with _guard(url):
        r = get_session().head(url, follow_redirects=True, timeout=timeout,
                               headers={"Accept-Encoding": "identity"})  # fmt: skip
        hf_raise_for_status(r)
        length = r.headers.get("Content-Length", "").strip()
        return int(length) if length.isdigit() else None


def url_weights(url: str, name: str, size: int | None, timeout: float = HUB_TIMEOUT) -> FileCount:
    """The file's parameters from its header (ranged reads); ``SourceError`` when it has none."""
    with _guard(url):
        header = remote_header(url, size, {}, timeout)
    if header is None:
        raise SourceError(f"url:{url}: not a safetensors file (its first bytes hold no header)")
    return count_header(name, size or 0, header)


def url_transfer(
    url: str, part: Path, size: int | None, progress: Callable[[int], object],
    timeout: float = HUB_TIMEOUT, say: Callable[[str], None] = lambda _: None,
) -> None:  # fmt: skip
    """Fill ``part`` from ``url``, resuming the bytes it holds."""
    with _guard(url), claim(part.parent, part.name, f"url:{url}"):
        try:
            declared = transfer(url, part, size=size, headers={}, what=f"url:{url}", say=say,
                                timeout=timeout, progress=progress)  # fmt: skip
        except TransferError as exc:
            raise HubError(str(exc)) from None
    if declared is None:
        part.unlink(missing_ok=True)
        raise HubError(
            f"url:{url}: the server declared no size (no Content-Length), so a cut-short file "
            "cannot be told from a whole one: refused"
        )


def folder_files(root: Path) -> list[tuple[str, int]]:
    """A local folder's (or one file's) files as (relative path, size), without hidden files,
    docs and pictures; sorted."""
    if root.is_file():
        return [(root.name, root.stat().st_size)]
    out = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        hidden = any(s.startswith(".") for s in rel.split("/"))
        wanted = not matches(rel, DEFAULT_IGNORE) or rel.endswith(WEIGHT_SUFFIXES)
        if p.is_file() and not hidden and wanted:
            out.append((rel, p.stat().st_size))
    return out


def folder_weights(root: Path) -> list[FileCount]:
    """Every weight file of a local folder (or one file), from its header in place."""
    from inline_core import HeaderError, read_header

    base = root.parent if root.is_file() else root
    counts = []
    for rel, size in folder_files(root):
        if not rel.endswith(WEIGHT_SUFFIXES):
            continue
        try:
            counts.append(count_header(rel, size, read_header(base / rel)))
        except HeaderError:
            counts.append(by_size(rel, size))
    return counts


def copy_resume(src: Path, part: Path, progress: Callable[[int], object]) -> None:
    """Copy ``src`` into ``part``, after the bytes ``part`` holds already."""
    try:
        have = part.stat().st_size if part.is_file() else 0
        if have > src.stat().st_size:
            part.unlink()
            have = 0
        with src.open("rb") as fin, part.open("ab") as fout:
            fin.seek(have)
            while chunk := fin.read(_COPY_CHUNK):
                fout.write(chunk)
                have += len(chunk)
                progress(have)
    except OSError as exc:
        raise HubError(disk_problem(exc, part) if exc.filename != str(src) else
                       f"file:{src}: cannot read it: {exc.strerror or exc}") from None  # fmt: skip


def same_place(a: Path, b: Path) -> bool:
    with contextlib.suppress(OSError):
        return a.resolve() == b.resolve()
    return False


@contextlib.contextmanager
def claim_stage(staging: Path, name: str, what: str) -> Iterator[None]:
    """Hold a fetch's stage for the block (one fetch of a model at a time, across processes;
    the kernel lets go of a killed one's hold); ``HubError`` while another holds it."""
    with claim(staging, name, what):
        yield


def end_stage(stage: Path) -> None:
    """After a fetch: drop its stage's lock unless another fetch waits on it, and the staging
    folders left empty (``imports/``, ``.downloads/``)."""
    lock = stage.parent / f"{stage.name}.lock"
    with contextlib.suppress(OSError), lock.open("a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return
        lock.unlink()
    for folder in (stage.parent, stage.parent.parent):
        with contextlib.suppress(OSError):
            folder.rmdir()
