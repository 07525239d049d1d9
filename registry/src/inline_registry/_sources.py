"""Pack sources: a local folder, a wheel, ``name==version`` from the index, or a git URL at a ref.

Whatever the source, the result is a staged copy that nothing can change underneath us: a
folder is copied (no ``.git``, no venvs, no caches), a git commit is exported with
``git archive`` from a bare mirror (no ``.git``, no hooks ever run), a wheel is copied and its
hash taken. The staged tree is what is scanned, built and kept with the installed version.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from packaging.tags import sys_tags
from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)
from packaging.version import Version

from ._errors import SourceUnavailable
from ._lock import SourceRecord
from ._uv import find_links_list

COPY_SKIP = frozenset(
    {
        ".git", ".hg", ".svn", ".venv", "venv", "__pycache__", ".pytest_cache", ".ruff_cache",
        ".mypy_cache", ".tox", ".nox", "build", "dist", "node_modules",
    }
)  # fmt: skip
SEMVER_TAG = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)$")
GIT_PREFIXES = ("https://", "http://", "git@", "file://", "ssh://")
INDEX_SPEC = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:==\s*([A-Za-z0-9.+!_-]+))?$")
DEFAULT_INDEX = "https://pypi.org/simple"


@dataclass(frozen=True, slots=True)
class SourceSpec:
    """What the operator named: the kind of source, where it is, and the ref asked for."""

    kind: str  # folder | wheel | index | git
    location: str
    ref: str | None = None
    version: str | None = None  # index: the version asked for (None = newest)


@dataclass(frozen=True, slots=True)
class Fetched:
    """A staged source: a tree to build (folder, git) or a wheel (wheel, index)."""

    record: SourceRecord
    tree: Path  # the staged tree (for a wheel: its unpacked contents, for the scan)
    wheel: Path | None  # the wheel itself, when the source is one
    digest: str  # sha256 of the staged tree or of the wheel


def parse_source(text: str, ref: str | None = None) -> SourceSpec:
    """Classify a SOURCE argument."""
    text = text.strip()
    if text.startswith(GIT_PREFIXES) and text.endswith(".whl"):
        raise SourceUnavailable(text, "a wheel is installed from a file: download it first")
    if text.startswith(GIT_PREFIXES) or text.endswith(".git"):
        if text.startswith(("http://", "ssh://")):
            raise SourceUnavailable(text, "git URLs must be https://, git@ or file://")
        return SourceSpec("git", text, ref=ref)
    path = Path(text).expanduser()
    if text.endswith(".whl"):
        if not path.is_file():
            raise SourceUnavailable(text, "no such wheel file")
        return SourceSpec("wheel", str(path.resolve()))
    if path.is_dir():
        if (path / ".git").exists() and ref is not None:
            return SourceSpec("git", path.resolve().as_uri(), ref=ref)
        return SourceSpec("folder", str(path.resolve()))
    match = INDEX_SPEC.match(text)
    if match and not any(sep in text for sep in ("/", "\\")):
        return SourceSpec("index", canonicalize_name(match[1]), version=match[2])
    raise SourceUnavailable(
        text,
        "not a folder, a .whl file, NAME==VERSION, or a git URL (https://, git@, file://)",
    )


def fetch(
    spec: SourceSpec, staging: Path, cache_dir: Path, say: Callable[[str], None] | None = None
) -> Fetched:
    """Stage ``spec`` under ``staging`` (``source/``, ``dist/``)."""
    tree = staging / "source"
    if spec.kind == "folder":
        _copy_tree(Path(spec.location), tree)
        record = SourceRecord(kind="folder", location=spec.location)
        return Fetched(record, tree, None, tree_digest(tree))
    if spec.kind == "wheel":
        wheel = _stage_wheel(Path(spec.location), staging)
        record = SourceRecord(kind="wheel", location=spec.location)
        return Fetched(record, tree, wheel, _unpack_wheel(wheel, tree))
    if spec.kind == "index":
        wheel, version = _download(spec, staging / "dist", say)
        record = SourceRecord(kind="index", location=f"{spec.location}=={version}")
        return Fetched(record, tree, wheel, _unpack_wheel(wheel, tree))
    commit, ref = _git_export(spec, tree, cache_dir, say)
    record = SourceRecord(kind="git", location=spec.location, ref=ref, commit=commit)
    return Fetched(record, tree, None, tree_digest(tree))


# folders ----------------------------------------------------------------------------------------
def _copy_tree(src: Path, dst: Path) -> None:
    if not (src / "pyproject.toml").is_file():
        raise SourceUnavailable(str(src), "the folder has no pyproject.toml")

    def ignore(folder: str, names: list[str]) -> set[str]:
        return {n for n in names if n in COPY_SKIP or n.endswith((".egg-info", ".pyc", ".pyo"))}

    shutil.copytree(src, dst, symlinks=True, ignore=ignore)


def tree_digest(root: Path) -> str:
    """sha256 over a tree's relative paths and contents (links by their target)."""
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() or p.is_symlink()):
        rel = path.relative_to(root).as_posix()
        h.update(rel.encode() + b"\0")
        if path.is_symlink():
            h.update(b"link:" + os.readlink(path).encode())
        else:
            h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def file_sha256(path: Path) -> str:
    """sha256 of a file, hex."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


# wheels ------------------------------------------------------------------------------------------
def _stage_wheel(src: Path, staging: Path) -> Path:
    try:
        parse_wheel_filename(src.name)
    except InvalidWheelFilename as exc:
        raise SourceUnavailable(str(src), f"not a wheel file name: {exc}") from None
    dist = staging / "dist"
    dist.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy2(src, dist / src.name))


def _unpack_wheel(wheel: Path, tree: Path) -> str:
    """Unpack a wheel for the scan, refusing members that would land outside ``tree``."""
    tree.mkdir(parents=True, exist_ok=True)
    try:
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                name = PurePosixPath(info.filename)
                if name.is_absolute() or ".." in name.parts:
                    raise SourceUnavailable(str(wheel), f"unsafe member path '{info.filename}'")
                if info.is_dir():
                    continue
                target = tree.joinpath(*name.parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(zf.read(info))
    except zipfile.BadZipFile as exc:
        raise SourceUnavailable(str(wheel), f"not a readable wheel: {exc}") from None
    return file_sha256(wheel)


def _download(spec: SourceSpec, dest: Path, say: Callable[[str], None] | None) -> tuple[Path, str]:
    """The best wheel of ``name[==version]``: from the find-links folders, else the index."""
    name = spec.location
    candidates = _local_wheels(name) + _index_wheels(name)
    tags = {str(t) for t in sys_tags()}
    best: tuple[Version, int, str, str | None] | None = None
    for i, (filename, url, sha) in enumerate(candidates):
        try:
            _, version, _, wheel_tags = parse_wheel_filename(filename)
        except InvalidWheelFilename:
            continue
        if spec.version is not None and version != Version(spec.version):
            continue
        if spec.version is None and version.is_prerelease:
            continue
        if not any(str(t) in tags for t in wheel_tags):
            continue
        key = (version, -i, url, sha)
        if best is None or key[:2] > best[:2]:
            best = key
    if best is None:
        wanted = f"{name}=={spec.version}" if spec.version else name
        raise SourceUnavailable(
            wanted, "no wheel for this platform in the find-links folders or on the index"
        )
    version, _, url, sha = best
    dest.mkdir(parents=True, exist_ok=True)
    filename = urllib.parse.unquote(url.rsplit("/", 1)[-1].split("#", 1)[0])
    target = dest / filename
    if say is not None:
        say(f"downloading {filename}")
    if url.startswith("file://"):
        shutil.copy2(urllib.request.url2pathname(urllib.parse.urlparse(url).path), target)
    else:
        with urllib.request.urlopen(url, timeout=60) as resp, open(target, "wb") as fh:
            shutil.copyfileobj(resp, fh)
    if sha is not None and file_sha256(target) != sha:
        raise SourceUnavailable(url, "the downloaded wheel does not match the index's sha256")
    return target, str(version)


def _local_wheels(name: str) -> list[tuple[str, str, str | None]]:
    found: list[tuple[str, str, str | None]] = []
    for folder in find_links_list():
        root = Path(folder)
        if not root.is_dir():
            continue
        for wheel in sorted(root.glob("*.whl")):
            try:
                wname = parse_wheel_filename(wheel.name)[0]
            except InvalidWheelFilename:
                continue
            if wname == name:
                found.append((wheel.name, wheel.resolve().as_uri(), None))
    return found


def _index_wheels(name: str) -> list[tuple[str, str, str | None]]:
    index = (
        os.environ.get("UV_DEFAULT_INDEX")
        or os.environ.get("UV_INDEX_URL")
        or os.environ.get("PIP_INDEX_URL")
        or DEFAULT_INDEX
    ).rstrip("/")
    req = urllib.request.Request(
        f"{index}/{name}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            data = json.load(resp)
    except (OSError, ValueError):
        return []
    files: list[tuple[str, str, str | None]] = []
    for item in data.get("files", []):
        filename = item.get("filename", "")
        if filename.endswith(".whl") and not item.get("yanked"):
            url = urllib.parse.urljoin(f"{index}/{name}/", item.get("url", ""))
            files.append((filename, url, (item.get("hashes") or {}).get("sha256")))
    return files


# git -----------------------------------------------------------------------------------------
def _git(args: list[str], *, cwd: Path | None = None, what: str = "") -> str:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    cmd = ["git", "-c", "core.hooksPath=/dev/null", "-c", "protocol.file.allow=always", *args]
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, check=False)
    except FileNotFoundError:
        raise SourceUnavailable(what, "git is not installed") from None
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip()
        raise SourceUnavailable(what, f"git {args[0]} failed: {err}")
    return proc.stdout.decode(errors="replace")


def git_mirror(url: str, cache_dir: Path, say: Callable[[str], None] | None) -> Path:
    key = hashlib.sha256(url.encode()).hexdigest()[:16]
    mirror = cache_dir / "git" / f"{key}.git"
    if (mirror / "HEAD").exists():
        if say is not None:
            say(f"updating the mirror of {url}")
        _git(["fetch", "--quiet", "--prune", "--tags", "--force", "origin",
              "+refs/heads/*:refs/heads/*"], cwd=mirror, what=url)  # fmt: skip
        return mirror
    if say is not None:
        say(f"cloning {url}")
    mirror.parent.mkdir(parents=True, exist_ok=True)
    tmp = mirror.with_name(f".{mirror.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        _git(["clone", "--quiet", "--mirror", url, str(tmp)], what=url)
        os.replace(tmp, mirror)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return mirror


def newest_semver_tag(tags: list[str]) -> str | None:
    """The newest ``vX.Y.Z`` / ``X.Y.Z`` tag (no pre-releases), or None."""
    best: tuple[tuple[int, int, int], str] | None = None
    for tag in tags:
        m = SEMVER_TAG.match(tag)
        if m:
            key = (int(m[1]), int(m[2]), int(m[3]))
            if best is None or key > best[0]:
                best = (key, tag)
    return best[1] if best else None


def resolve_ref(mirror: Path, url: str, ref: str | None) -> tuple[str, str]:
    """(commit, ref as recorded) for a tag, branch, commit or ``latest``."""
    tags = _git(["tag", "--list"], cwd=mirror, what=url).split()
    if ref is None or ref == "latest":
        tag = newest_semver_tag(tags)
        if tag is None:
            if ref == "latest":
                raise SourceUnavailable(url, "no semver tag (vX.Y.Z) to take as 'latest'")
            ref = "HEAD"
        else:
            ref = tag
    for candidate in (f"refs/tags/{ref}", f"refs/heads/{ref}", ref):
        try:
            commit = _git(
                ["rev-parse", "--verify", "--quiet", f"{candidate}^{{commit}}"],
                cwd=mirror,
                what=url,
            ).strip()
        except SourceUnavailable:
            continue
        if commit:
            return commit, ref
    raise SourceUnavailable(url, f"no tag, branch or commit named '{ref}'")


def _git_export(
    spec: SourceSpec, tree: Path, cache_dir: Path, say: Callable[[str], None] | None
) -> tuple[str, str]:
    mirror = git_mirror(spec.location, cache_dir, say)
    commit, ref = resolve_ref(mirror, spec.location, spec.ref)
    if say is not None:
        say(f"exporting {ref} ({commit[:12]})")
    archive = subprocess.run(
        ["git", "-c", "core.hooksPath=/dev/null", "archive", "--format=tar", commit],
        cwd=mirror,
        capture_output=True,
        check=False,
    )
    if archive.returncode != 0:
        raise SourceUnavailable(spec.location, archive.stderr.decode(errors="replace"))
    tree.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tf:
            tf.extractall(tree, filter="data")
    except tarfile.TarError as exc:
        raise SourceUnavailable(spec.location, f"unsafe tree at {ref}: {exc}") from None
    return commit, ref
