"""The sources Inline ships: the Hugging Face Hub (``hf:ORG/NAME[@REVISION]``), a safetensors
file at a URL (``url:https://.../model.safetensors``) and a local folder or file
(``file:/path/to/folder``)."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from ..hub import (
    HubSource,
    ImportPlan,
    SourceError,
    WeightCount,
    card_after_import,
    check_url,
    copy_resume,
    count_remote,
    folder_files,
    folder_weights,
    infer_category,
    parse_source,
    pending,
    plan_import,
    resolve_token,
    run_import,
    same_place,
    url_size,
    url_transfer,
    url_weights,
)
from ._base import FileProgress, Importer, ModelFile, Progress, model_name


class HuggingFaceImporter(Importer):
    """A Hub repo: ``HuggingFaceImporter("ORG/NAME", task="llm", revision="main")``. Its files
    are the repo's at one commit after the task's ignore patterns (``include`` / ``exclude``
    globs narrow them); ``token_secret`` names the secret holding a Hub token (else
    ``HF_TOKEN``). Fetching is the Hub transfer: staged, resumable across processes, verified
    by size and hash."""

    prefix: ClassVar[str] = "hf"
    about: ClassVar[str] = "a Hugging Face Hub repo: hf:ORG/NAME[@REVISION]"

    def __init__(
        self,
        model: str,
        *,
        include: Sequence[str] = (),
        exclude: Sequence[str] = (),
        token_secret: str | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(model, **kw)
        self.repo: HubSource = parse_source(
            f"hf:{model}" + (f"@{self.revision}" if self.revision else "")
        )
        self.include, self.exclude, self.token_secret = tuple(include), tuple(exclude), token_secret

    @functools.cached_property
    def plan(self) -> ImportPlan:
        """The repo resolved to a commit and its file list (metadata only; read once)."""
        s = self.settings
        return plan_import(self.repo, self.models_dir, category=self.task, include=self.include,
                           exclude=self.exclude, token=resolve_token(s.data_dir, self.token_secret),
                           ignores=s.hf_ignore, timeout=s.hub_timeout,
                           name=self.alias)  # fmt: skip

    @property
    def name(self) -> str:
        return model_name(self.repo.name, self.source)

    @property
    def category(self) -> str:
        return self.plan.category

    @property
    def commit(self) -> str:
        return self.plan.commit

    def config(self) -> dict[str, Any] | None:
        return self.plan.config

    def files(self) -> list[ModelFile]:
        return [ModelFile(f.path, f.size) for f in self.plan.files]

    def weights(self) -> list[WeightCount]:
        return count_remote(self.plan)

    def missing(self) -> list[ModelFile]:
        return [ModelFile(f.path, f.size) for f in pending(self.plan, self.models_dir)]

    def check(self) -> None:
        self.plan  # noqa: B018  # the plan refuses a repo without weights

    def estimate(self, **kw: Any) -> dict[str, Any]:
        return super().estimate(**kw) | {"commit": self.plan.commit}

    def fetch(self, progress: Progress | None = None) -> Path:
        todo = {f.path: i for i, f in enumerate(self.plan.files)}
        count = len(todo)

        def say(line: str) -> None:  # "fetching PATH (N MB)": one file starts
            path = line.removeprefix("fetching ").rsplit(" (", 1)[0]
            f = next((f for f in self.plan.files if f.path == path), None)
            if progress is not None and f is not None:
                progress(FileProgress(f.path, 0, f.size, todo[f.path], count))

        return run_import(self.plan, self.models_dir, say)


class UrlImporter(Importer):
    """One safetensors file at a URL: ``UrlImporter("https://host/x/model.safetensors",
    task="checkpoint")``, sized from its header by ranged reads, fetched resumably into
    ``models/<category>/<stem>/``. Its task defaults to ``checkpoint``."""

    prefix: ClassVar[str] = "url"
    about: ClassVar[str] = "one safetensors file over http(s): url:https://HOST/PATH.safetensors"

    def __init__(self, model: str, **kw: Any) -> None:
        super().__init__(model, **kw)
        self.filename = check_url(model)

    @property
    def source(self) -> str:
        return f"url:{self.model}"

    @property
    def name(self) -> str:
        return model_name(self.filename.removesuffix(".safetensors"), self.source)

    def infer_category(self) -> str:
        return "checkpoint"

    @functools.cached_property
    def size(self) -> int | None:
        return url_size(self.model, self.settings.hub_timeout)

    def files(self) -> list[ModelFile]:
        return [ModelFile(self.filename, self.size)]

    def weights(self) -> list[WeightCount]:
        return [url_weights(self.model, self.filename, self.size, self.settings.hub_timeout)]

    def fetch_file(self, file: ModelFile, part: Path, progress: Callable[[int], object]) -> None:
        url_transfer(self.model, part, file.size, progress, self.settings.hub_timeout)


class FileImporter(Importer):
    """A model folder (or one weight file) on this machine: ``FileImporter("/path/to/folder")``,
    sized from its headers in place, copied (with resume) into ``models/<category>/<name>/``;
    a folder already there is only given its card."""

    prefix: ClassVar[str] = "file"
    about: ClassVar[str] = "a folder or weight file on this machine: file:/path/to/folder"

    def __init__(self, model: str, **kw: Any) -> None:
        super().__init__(model, **kw)
        self.path = Path(model).expanduser().resolve()
        if not self.path.exists():
            raise SourceError(f"file:{model}: no such file or folder")

    @property
    def source(self) -> str:
        return f"file:{self.path}"

    @property
    def name(self) -> str:
        stem = self.path.name if self.path.is_dir() else self.path.stem
        return model_name(stem, self.source)

    def infer_category(self) -> str:
        found = infer_category([p for p, _ in folder_files(self.path)], self.config())
        return found or super().infer_category()

    def config(self) -> dict[str, Any] | None:
        try:
            loaded = json.loads((self.path / "config.json").read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            return None
        return loaded if isinstance(loaded, dict) else None

    def files(self) -> list[ModelFile]:
        return [ModelFile(p, n) for p, n in folder_files(self.path)]

    def weights(self) -> list[WeightCount]:
        return folder_weights(self.path)

    def fetch(self, progress: Progress | None = None) -> Path:
        self.check()
        if same_place(self.path, self.dest):
            card_after_import(self.dest, self.source, None, self.category, self.task)
            return self.dest
        return super().fetch(progress)

    def fetch_file(self, file: ModelFile, part: Path, progress: Callable[[int], object]) -> None:
        base = self.path.parent if self.path.is_file() else self.path
        copy_resume(base / file.path, part, progress)


BUILTIN: tuple[type[Importer], ...] = (HuggingFaceImporter, UrlImporter, FileImporter)
