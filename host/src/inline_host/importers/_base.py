"""The importer seam: an ``Importer`` names, sizes and fetches a model of one source; a source
is a subclass, found by its ``prefix`` (``hf:``, ``url:``, ``file:``, or a plugin's).

A subclass gives ``files()`` (what a fetch brings, after its ignore patterns), ``weights()``
(each weight file's parameters and bytes, read from its safetensors header without fetching
it) and ``fetch_file()`` (one file's bytes into a staged file, resuming what it holds). The base
turns those into ``requirements()``, a resumable ``fetch()`` (staged under
``models/.downloads/imports/``, moved into ``models/<category>/<name>/`` whole, a card written)
and ``card()``. A source with a richer transfer (the Hub's, verified by hash) overrides
``fetch()`` itself.
"""

from __future__ import annotations

import abc
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, Final

import msgspec
from inline_core import Budget

from .._settings import Settings
from ..hub import (
    CARD,
    CATEGORY_DIRS,
    STAGING,
    HubError,
    SourceError,
    WeightCount,
    card_after_import,
    claim_stage,
    end_stage,
    estimate_of,
    import_fields,
    read_card,
    requirement_fields,
)
from ..hub import merge_fields as _merge
from ..models import UnsafeName, budget_of, check_name

#: What a fetch is told about each file: bytes done of total (None when unknown).
Progress = Callable[["FileProgress"], object]
IMPORTS: Final = "imports"


class ModelId(msgspec.Struct, frozen=True):
    """``PREFIX:MODEL[@REVISION]`` split: ``hf:org/name@v1`` -> ``hf``, ``org/name``, ``v1``."""

    prefix: str
    model: str
    revision: str | None = None

    def __str__(self) -> str:
        return f"{self.prefix}:{self.model}" + (f"@{self.revision}" if self.revision else "")


class ModelFile(msgspec.Struct, frozen=True):
    """One file a fetch brings: its path in the model's folder and its size, if known."""

    path: str
    size: int | None = None


class Requirements(msgspec.Struct, frozen=True):
    """What one replica of a model needs: its parameters and weight bytes, GPU memory, host
    memory and devices (the card's ``requirements`` keys, plus ``bytes``)."""

    params: int
    bytes: int
    vram_gb: float
    ram_gb: float
    devices: int


class FileProgress(msgspec.Struct, frozen=True):
    """A fetch's progress on one file."""

    path: str
    done: int
    total: int | None
    index: int
    count: int


def split_model_id(text: str) -> ModelId:
    """``PREFIX:MODEL[@REVISION]`` as a ``ModelId``; ``SourceError`` without a prefix. A
    revision is what follows the last ``@`` when no ``/`` follows it (a URL keeps its ``@``)."""
    prefix, sep, rest = text.partition(":")
    if not sep or not prefix or not prefix.replace("-", "").isalnum() or not rest:
        raise SourceError(
            f"'{text}' names no source: write PREFIX:MODEL, e.g. hf:ORG/NAME, "
            "url:https://.../model.safetensors or file:/path/to/folder"
        )
    model, at, revision = rest.rpartition("@")
    if not at or "/" in revision or not model:
        return ModelId(prefix, rest)
    if not revision:
        raise SourceError(f"'{text}': an empty revision after '@'")
    return ModelId(prefix, model, revision)


class Importer(abc.ABC):
    """A model of one source: ``Importer("MODEL", task=...)``; see the module's docstring."""

    #: The source's prefix: ``hf`` for ``hf:ORG/NAME``.
    prefix: ClassVar[str] = ""
    #: One line for ``inline models sources``.
    about: ClassVar[str] = ""

    def __init__(
        self,
        model: str,
        *,
        task: str | None = None,
        revision: str | None = None,
        models_dir: Path | None = None,
        settings: Settings | None = None,
        alias: str | None = None,
    ) -> None:
        if task is not None and task not in CATEGORY_DIRS:
            raise SourceError(f"task {task!r}: not a category (one of {', '.join(CATEGORY_DIRS)})")
        #: The folder name the user chose (``--as NAME``), else None: the source's ``name``.
        self.alias = None if alias is None else model_name(alias, f"--as {alias}")
        self.model = model
        self.task = task
        self.revision = revision
        self.settings = settings if settings is not None else Settings.from_env()
        self.models_dir = models_dir if models_dir is not None else self.settings.models_dir

    # what a source gives ----------------------------------------------------------------
    @property
    @abc.abstractmethod
    def name(self) -> str:
        """The model's folder name under ``models/<category>/``."""

    @property
    def category(self) -> str:
        """The kind of model (a ``CATEGORY_DIRS`` key): the task, else what the source tells."""
        return self.task or self.infer_category()

    def infer_category(self) -> str:
        """What the source's own files say the model is; ``SourceError`` when they don't."""
        raise SourceError(
            f"{self.source}: cannot tell what kind of model this is: pass task= (--as), one "
            f"of {', '.join(CATEGORY_DIRS)}"
        )

    def config(self) -> dict[str, Any] | None:
        """The model's ``config.json``, when it has one (sizes an LLM's KV cache)."""
        return None

    @abc.abstractmethod
    def files(self) -> list[ModelFile]:
        """What ``fetch`` brings, after the ignore patterns."""

    @abc.abstractmethod
    def weights(self) -> list[WeightCount]:
        """Each weight file's parameters and bytes per dtype, from its header (no fetch)."""

    def fetch_file(self, file: ModelFile, part: Path, progress: Callable[[int], object]) -> None:
        """Fill ``part`` with ``file``'s bytes, from those it holds already (a resume); tell
        ``progress`` the bytes held as they grow. The base ``fetch`` calls it."""
        raise NotImplementedError(f"{type(self).__name__} fetches through its own fetch()")

    # what the base makes of it ----------------------------------------------------------
    @property
    def source(self) -> str:
        return str(ModelId(self.prefix, self.model, self.revision))

    @property
    def folder_name(self) -> str:
        """The model's folder under ``models/<category>/``, and so its id in pickers and in the
        OpenAI ``model`` field: the alias (``--as NAME``), else the source's ``name``."""
        return self.alias or self.name

    @property
    def dest(self) -> Path:
        """Where the model lands: ``models/<category folder>/<folder_name>/``."""
        return self.models_dir / CATEGORY_DIRS[self.category] / self.folder_name

    def estimate(
        self, *, profile: str | None = None, budget: Budget | None = None
    ) -> dict[str, Any]:
        """The estimate's JSON (parameters and bytes per dtype, one replica, the fit)."""
        counts = self.weights()
        if not counts:
            raise SourceError(f"{self.source}: no weight files to import")
        found = self.files()
        return {"source": self.source, "files": len(found),
                "downloadBytes": sum(f.size or 0 for f in found),
                **estimate_of(counts, self.category, self.config(), profile=profile,
                              budget=budget or budget_of(self.settings))}  # fmt: skip

    def requirements(self) -> Requirements:
        """What one replica needs (from the weights' headers; nothing is fetched)."""
        out = self.estimate()
        fields = requirement_fields(out)
        return Requirements(params=int(out["params"]), bytes=int(out["bytes"]),
                            vram_gb=fields["requirements.vram_gb"],
                            ram_gb=fields["requirements.ram_gb"],
                            devices=fields["requirements.devices"])  # fmt: skip

    def card(self) -> dict[str, Any]:
        """The model's card: the fetched folder's ``inline.json``, else the card a fetch would
        write now."""
        if (self.dest / CARD).is_file():
            return read_card(self.dest)
        fields = import_fields(self.source, self.revision, self.category, self.task, self.dest)
        fields |= requirement_fields(self.estimate())
        return _merge({}, fields, "import")

    def stage(self) -> Path:
        """Where a fetch's files wait until all are there (the same in every process)."""
        folder = f"{CATEGORY_DIRS[self.category]}--{self.folder_name}"
        return self.models_dir / STAGING / IMPORTS / folder

    def missing(self) -> list[ModelFile]:
        """The files not yet in place."""
        return [f for f in self.files() if not _has(self.dest / f.path, f.size)]

    def check(self) -> None:
        """Refuse a source that holds no model (``SourceError``) before anything is fetched:
        the base reads its weights' headers."""
        if not self.weights():
            raise SourceError(f"{self.source}: holds no weight files: not a model")

    def fetch(self, progress: Progress | None = None) -> Path:
        """Bring every missing file (resuming what a stopped fetch staged, in any process),
        move them into ``dest`` and write the card; ``dest``."""
        self.check()
        tell = progress or (lambda _: None)
        files = self.files()
        stage = self.stage()
        try:
            stage.mkdir(parents=True, exist_ok=True)
            with claim_stage(stage.parent, stage.name, self.source):
                for i, f in enumerate(files):
                    if _has(self.dest / f.path, f.size) or _has(stage / f.path, f.size):
                        tell(FileProgress(f.path, f.size or 0, f.size, i, len(files)))
                        continue
                    part = stage / f"{f.path}.incomplete"
                    part.parent.mkdir(parents=True, exist_ok=True)
                    self.fetch_file(f, part, lambda n, f=f, i=i: tell(
                        FileProgress(f.path, n, f.size, i, len(files))))  # fmt: skip
                    if f.size is not None and part.stat().st_size != f.size:
                        got = part.stat().st_size
                        part.unlink()
                        raise HubError(f"{self.source}: {f.path}: got {got} bytes, expected "
                                       f"{f.size}; removed it, run the fetch again")  # fmt: skip
                    os.replace(part, stage / f.path)
                self._move_in(stage, files)
        except OSError as exc:
            raise HubError(f"{self.source}: cannot stage or move the files: {exc}") from None
        end_stage(stage)
        card_after_import(self.dest, self.source, self.revision, self.category, self.task)
        return self.dest

    def _move_in(self, stage: Path, files: Sequence[ModelFile]) -> None:
        if not self.dest.exists():
            self.dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(stage, self.dest)
            return
        for f in files:
            if (stage / f.path).is_file():
                (self.dest / f.path).parent.mkdir(parents=True, exist_ok=True)
                os.replace(stage / f.path, self.dest / f.path)
        shutil.rmtree(stage, ignore_errors=True)


def _has(path: Path, size: int | None) -> bool:
    return path.is_file() and (size is None or path.stat().st_size == size)


def model_name(text: str, source: str) -> str:
    """A folder name taken from a source (checked: no ``..``, no separator)."""
    try:
        check_name(text)
    except UnsafeName as exc:
        raise SourceError(f"{source}: {exc}") from None
    return text
