"""The Hugging Face importer's plan: which repo, which commit, which files, which category.

``hf:ORG/NAME[@REVISION]`` is resolved to one commit; the file list (with sizes, from the
Hub's tree) is filtered by the task's ignore patterns; the same list feeds the download and the
estimate, so the figures describe what is staged. Only metadata is read here (the repo's info,
its tree, ``config.json`` / ``model_index.json``): nothing is written. A metadata file is read
whole within ``INLINE_HUB_TIMEOUT`` and only up to ``METADATA_LIMIT``; a tree entry naming a
path outside the repo's folder (``../x``) refuses the repo.
"""

from __future__ import annotations

import fnmatch
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ..models import UnsafeName, check_name
from ._pull import HUB_TIMEOUT, Fetch, safe_relative
from ._secrets import HUB_SERVICE, SecretError, SecretStore

#: The most bytes of a metadata file (``config.json``, a safetensors header) read into memory.
METADATA_LIMIT: Final = 16 << 20

#: ``--as`` values and the folder of ``models/`` each lands in.
CATEGORY_DIRS: Final = {
    "llm": "llm", "seq2seq": "llm", "diffusers": "diffusers",
    "text-encoder": "text_encoders", "vae": "vae", "diffusion-model": "diffusion_models",
    "checkpoint": "checkpoints", "lora": "loras", "controlnet": "controlnet",
    "upscale": "upscale_models", "embeddings": "embeddings",
}  # fmt: skip
#: Docs, example pictures and git metadata: never part of a model.
DEFAULT_IGNORE: Final = (
    ".gitattributes", ".gitignore", ".github/*", "*.md", "docs/*", "*.png", "*.jpg", "*.jpeg",
    "*.gif", "*.webp", "*.mp4", "assets/*", "images/*", "examples/*", "samples/*", "figures/*",
)  # fmt: skip
#: Other weight formats, skipped when the repo has safetensors.
OTHER_WEIGHTS: Final = (
    "*.bin", "*.pt", "*.pth", "*.ckpt", "*.msgpack", "*.h5", "*.onnx", "*.onnx_data", "*.ot",
    "*.gguf", "*.tflite", "*.mlmodel", "*.mlpackage/*", "onnx/*", "openvino/*", "flax_model*",
    "tf_model*", "rust_model*", "coreml/*",
)  # fmt: skip
WEIGHT_SUFFIXES: Final = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf")
SEQ2SEQ_TYPES: Final = frozenset(
    {"t5", "mt5", "umt5", "bart", "mbart", "marian", "pegasus", "led", "longt5", "m2m_100",
     "nllb", "fsmt", "prophetnet", "blenderbot", "plbart", "bigbird_pegasus", "switch_transformers"}
)  # fmt: skip


class HubError(Exception):
    """A source that cannot be imported: bad name, unknown repo or revision, gated, offline."""


class SourceError(HubError):
    """The user's input names nothing importable: a malformed or unknown source, a repo or
    revision that does not exist, a repo with no weights, a URL that is no safetensors file
    (the CLI exits 2: bad input, not a failure along the way)."""


@dataclass(frozen=True, slots=True)
class HubSource:
    """``hf:ORG/NAME[@REVISION]``."""

    repo: str
    revision: str | None = None

    @property
    def name(self) -> str:
        return self.repo.split("/", 1)[1]

    def __str__(self) -> str:
        return f"hf:{self.repo}" + (f"@{self.revision}" if self.revision else "")


@dataclass(frozen=True, slots=True)
class RemoteFile:
    """One file of a repo at a commit, with its size (and an LFS file's sha256) from the Hub's
    tree."""

    path: str
    size: int | None
    sha256: str | None = None


@dataclass(frozen=True, slots=True)
class ImportPlan:
    """What an import fetches: files of ``source`` at ``commit`` into ``dest``."""

    source: HubSource
    commit: str
    category: str
    dest: Path
    files: tuple[RemoteFile, ...]
    skipped: tuple[str, ...]
    config: dict[str, Any] | None = None
    token: str | None = field(default=None, repr=False)
    #: Seconds each Hub request may go without a byte (``INLINE_HUB_TIMEOUT``).
    timeout: float = HUB_TIMEOUT

    @property
    def total_bytes(self) -> int:
        return sum(f.size or 0 for f in self.files)

    def fetches(self, stage: Path) -> list[Fetch]:
        """One ``Fetch`` per file, landing under ``stage`` (the import's ready folder)."""
        return [
            Fetch(f.path, self.source.repo, f.path, self.commit, stage / f.path, f.size, f.sha256)
            for f in self.files
        ]


def parse_source(text: str) -> HubSource:
    """``hf:ORG/NAME[@REVISION]`` as a ``HubSource``; a clear error otherwise."""
    if not text.startswith("hf:"):
        raise SourceError(f"'{text}' is not a Hugging Face source: write hf:ORG/NAME[@REVISION]")
    repo, _, revision = text[3:].partition("@")
    parts = repo.split("/")
    if len(parts) != 2 or not all(parts):
        raise SourceError(f"'{text}': the repo must be ORG/NAME (hf:ORG/NAME[@REVISION])")
    for part in parts:
        try:
            check_name(part)
        except UnsafeName as exc:
            raise SourceError(f"'{text}': {exc}") from None
    if "@" in text[3:] and not revision:
        raise SourceError(f"'{text}': an empty revision after '@'")
    return HubSource(repo, revision or None)


def resolve_token(data_dir: Path, token_secret: str | None) -> str | None:
    """The Hub token: the secret ``token_secret`` names, else None (huggingface_hub then reads
    ``HF_TOKEN`` itself). Never a token on the command line."""
    if token_secret is None:
        return None
    try:
        return SecretStore(data_dir).for_service(token_secret, HUB_SERVICE)
    except SecretError as exc:
        raise HubError(str(exc)) from None


def _hub_error(source: HubSource, exc: BaseException, token: str | None) -> HubError:
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    if isinstance(exc, GatedRepoError):
        has_token = token is not None or bool(os.environ.get("HF_TOKEN"))
        fix = (
            "your token has no access: accept the repo's terms on the Hub with that account"
            if has_token
            else "accept its terms on the Hub, then set HF_TOKEN or pass --token-secret NAME"
        )
        return HubError(f"{source} is a gated repo: {fix}")
    if isinstance(exc, RevisionNotFoundError):
        return SourceError(f"{source}: the repo has no revision '{source.revision}'")
    if isinstance(exc, RepositoryNotFoundError):
        return SourceError(
            f"{source}: no such repo (or it is private: set HF_TOKEN or pass --token-secret NAME)"
        )
    if isinstance(exc, HfHubHTTPError):
        return HubError(f"{source}: the Hub answered {exc}")
    return HubError(f"{source}: cannot reach the Hub ({endpoint()}): {exc}")


def endpoint() -> str:
    """The Hub's address (``HF_ENDPOINT`` selects a mirror)."""
    from huggingface_hub import constants

    return constants.ENDPOINT


def _guard(source: HubSource, token: str | None, fn: Callable[[], Any]) -> Any:
    from huggingface_hub.errors import HfHubHTTPError

    try:
        return fn()
    except HfHubHTTPError as exc:
        raise _hub_error(source, exc, token) from None
    except Exception as exc:  # connection errors (httpx's derive from no builtin error)
        if isinstance(exc, OSError) or type(exc).__module__.split(".")[0].startswith("http"):
            raise _hub_error(source, exc, token) from None
        raise


def _size_of(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _remote_file(e: Any) -> RemoteFile:
    """A tree entry as a ``RemoteFile``: its path checked, its size kept only if it is one."""
    path = e.path if isinstance(e.path, str) else repr(e.path)
    if not safe_relative(path):
        raise ValueError(f"a file named {path!r}, which would land outside the model's folder")
    lfs = e.lfs
    if lfs is not None:
        sha = lfs.sha256 if isinstance(lfs.sha256, str) else None
        return RemoteFile(path, _size_of(lfs.size), sha)
    return RemoteFile(path, _size_of(e.size))


def list_repo(
    source: HubSource, token: str | None, timeout: float = HUB_TIMEOUT
) -> tuple[str, list[RemoteFile]]:
    """The commit ``source`` names and its files (paths and sizes), from the Hub's metadata.
    A tree that lists a path outside the repo's folder, or is malformed, refuses the repo."""
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import RepoFile
    from huggingface_hub.utils import get_session

    wait = timeout
    get_session().timeout = wait  # type: ignore[assignment]  # the tree's pages take no timeout
    api = HfApi(endpoint=endpoint())
    try:
        info = _guard(source, token, lambda: api.model_info(
            source.repo, revision=source.revision, token=token, timeout=wait))  # fmt: skip
        commit = str(info.sha or source.revision or "main")
        tree = _guard(source, token, lambda: list(api.list_repo_tree(
            source.repo, revision=commit, recursive=True, token=token)))  # fmt: skip
        files = [_remote_file(e) for e in tree if isinstance(e, RepoFile)]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        reason = str(exc).strip("'\"") or type(exc).__name__
        raise HubError(f"{source}: the Hub's file list is refused: {reason}") from None
    return commit, sorted(files, key=lambda f: f.path)


def read_limited(
    url: str,
    headers: dict[str, str],
    what: str,
    *,
    limit: int = METADATA_LIMIT,
    timeout: float = HUB_TIMEOUT,
) -> tuple[int, bytes]:
    """GET ``url`` into memory: (status, body), at most ``limit`` bytes (a ranged read asks for
    fewer: a server that ignores the range is read only that far), the whole answer within
    ``INLINE_HUB_TIMEOUT``. ``HubError`` for a body beyond ``limit`` or a server too slow."""
    from huggingface_hub.utils import get_session, hf_raise_for_status

    wait = timeout
    deadline = time.monotonic() + wait
    ranged = "Range" in headers
    with get_session().stream("GET", url, headers=headers, follow_redirects=True,
                              timeout=wait) as r:  # fmt: skip
        hf_raise_for_status(r)
        length = r.headers.get("Content-Length", "").strip()
        if not ranged and length.isdigit() and int(length) > limit:
            raise HubError(_too_big(what, int(length), limit))
        body = bytearray()
        for chunk in r.iter_bytes():
            body += chunk
            if len(body) > limit:
                if ranged:
                    return r.status_code, bytes(body[:limit])
                raise HubError(_too_big(what, None, limit))
            if time.monotonic() > deadline:
                raise HubError(
                    f"{what}: not received whole within {wait:g} s (INLINE_HUB_TIMEOUT): the "
                    "server sends too slowly or stalls"
                )
        return r.status_code, bytes(body)


def _too_big(what: str, size: int | None, limit: int) -> str:
    told = f"is {size / 1e6:.1f} MB" if size is not None else "goes on"
    return (
        f"{what} {told}, past the {limit >> 20} MiB a metadata file may be: refused (not a "
        "model's metadata)"
    )


def read_remote_json(
    source: HubSource, commit: str, path: str, token: str | None, timeout: float = HUB_TIMEOUT
) -> Any:
    """A small JSON file of the repo (``config.json``...), read into memory (at most
    ``METADATA_LIMIT``), never saved."""
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers

    def get() -> Any:
        url = hf_hub_url(source.repo, path, revision=commit)
        headers = build_hf_headers(token=token)
        _, body = read_limited(url, headers, f"{source}: {path}", timeout=timeout)
        return json.loads(body)

    try:
        return _guard(source, token, get)
    except ValueError as exc:
        raise HubError(f"{source}: {path} is not valid JSON: {exc}") from None


def infer_category(paths: Sequence[str], config: dict[str, Any] | None) -> str | None:
    """``diffusers`` for a pipeline (``model_index.json``); from ``config.json``'s
    architectures, ``llm`` (causal LM), ``seq2seq`` (encoder-decoder) or ``text-encoder``."""
    if "model_index.json" in paths:
        return "diffusers"
    if not config:
        return None
    archs = [str(a) for a in config.get("architectures") or []]
    model_type = str(config.get("model_type") or "")
    if config.get("is_encoder_decoder") or model_type in SEQ2SEQ_TYPES:
        return "seq2seq" if not any(a.endswith("EncoderModel") for a in archs) else "text-encoder"
    if any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs):
        return "llm"
    if archs:
        return "text-encoder"
    return None


def matches(path: str, globs: Sequence[str]) -> bool:
    base = path.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatch(path, g) or ("/" not in g and fnmatch.fnmatch(base, g))
               for g in globs)  # fmt: skip


def select_files(
    files: Sequence[RemoteFile],
    category: str,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    ignores: Sequence[str] = (),
) -> tuple[list[RemoteFile], list[str]]:
    """(kept, skipped) after the task's ignore patterns, ``ignores`` (``INLINE_HF_IGNORE``) and
    ``--exclude``.
    ``--include`` keeps only what it matches (and may bring back a default-ignored file)."""
    paths = [f.path for f in files]
    defaults: list[str] = list(DEFAULT_IGNORE)
    if any(p.endswith(".safetensors") for p in paths):
        defaults += OTHER_WEIGHTS
    if category in ("llm", "seq2seq", "text-encoder"):
        defaults.append("original/*")  # a consolidated checkpoint beside the HF layout
    if category == "diffusers":
        # a consolidated single-file checkpoint sitting beside the component folders
        defaults += [p for p in paths if "/" not in p and p.endswith(WEIGHT_SUFFIXES)]
    drop = [*ignores, *exclude]
    kept: list[RemoteFile] = []
    skipped: list[str] = []
    for f in files:
        explicit = bool(include) and matches(f.path, include)
        ignored = matches(f.path, drop) or (not explicit and matches(f.path, defaults))
        if ignored or (include and not explicit):
            skipped.append(f.path)
        else:
            kept.append(f)
    return kept, skipped


def plan_import(
    source: HubSource,
    models_dir: Path,
    *,
    category: str | None = None,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    token: str | None = None,
    ignores: Sequence[str] = (),
    timeout: float = HUB_TIMEOUT,
    name: str | None = None,
) -> ImportPlan:
    """Resolve ``source`` to a commit and the files an import of it fetches; ``ignores`` are
    the operator's globs (``INLINE_HF_IGNORE``), ``timeout`` the Hub's (``INLINE_HUB_TIMEOUT``):
    the top passes its settings'. ``name`` is the model's folder (``--as NAME``; else the
    repo's name)."""
    if category is not None and category not in CATEGORY_DIRS:
        raise SourceError(f"--as {category}: not a category (one of {', '.join(CATEGORY_DIRS)})")
    commit, files = list_repo(source, token, timeout)
    paths = [f.path for f in files]
    config = None
    if "config.json" in paths:
        loaded = read_remote_json(source, commit, "config.json", token, timeout)
        config = loaded if isinstance(loaded, dict) else None
    if not any(p.endswith(WEIGHT_SUFFIXES) for p in paths):
        raise SourceError(
            f"{source}: the repo holds no weight files ({', '.join(WEIGHT_SUFFIXES)}): not a model"
        )
    found = category or infer_category(paths, config)
    if found is None:
        raise SourceError(
            f"{source}: cannot tell what kind of model this is (no model_index.json, no "
            f"architectures in config.json): pass --as ({', '.join(CATEGORY_DIRS)})"
        )
    kept, skipped = select_files(files, found, include, exclude, ignores)
    if not kept:
        raise SourceError(f"{source}: no file is left to import after the ignore patterns")
    dest = models_dir / CATEGORY_DIRS[found] / (name or source.name)
    return ImportPlan(
        source, commit, found, dest, tuple(kept), tuple(skipped), config, token, timeout
    )


def describe(plan: ImportPlan) -> dict[str, Any]:
    """The plan as JSON (``--dry-run --json``, the downloads API)."""
    return {
        "source": str(plan.source),
        "commit": plan.commit,
        "category": plan.category,
        "dest": str(plan.dest),
        "files": [{"path": f.path, "size": f.size} for f in plan.files],
        "skipped": list(plan.skipped),
        "bytes": plan.total_bytes,
    }


def source_record(plan: ImportPlan) -> str:
    """What an imported folder records of where it came from (``.inline-source.json``)."""
    return json.dumps({"source": f"hf:{plan.source.repo}", "revision": plan.source.revision,
                       "commit": plan.commit, "category": plan.category}, indent=1)  # fmt: skip
