"""The downloads service behind ``/v1/downloads``: the same downloads as ``inline models import``
and ``inline models pull``, each in its own process, with progress per file.

A Hub repo (``hf:ORG/NAME``) and a node's files are planned and fetched here (``_job``); any other
source (``url:``, ``file:``, a plugin's) through the importers, which live on a floor above this
one: the top hands them in (``ImportSources``), a plan to size the files and the module a child
runs to fetch them.

At most ``INLINE_MAX_DOWNLOADS`` (2) children run at once; the others wait, ``queued``, in the
order they came (past ``MAX_WAITING`` waiting, a start is refused 429 with ``Retry-After``).

Progress is read from disk (the staged ``.incomplete`` file of the transfer under way, the
finished files' sizes): nothing is streamed from the child but "file i started/finished". A
cancelled child is waited for, so that the next download of the same files finds their stage
free and resumes it.

A child never outlives the host: it inherits no descriptor but its three pipes (``close_fds``,
so never the listening socket), and it exits when its stdin, which the host holds open, reaches
its end (the host is gone, even killed) or its parent changes (``_job``).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

import anyio
import anyio.abc

from .._settings import Settings
from ._hf import HubError, ImportPlan, SourceError, parse_source, plan_import, resolve_token
from ._import import pending, raw_staging
from ._job import fetch_to_json, plan_to_json
from ._pull import Fetch, PullError, is_present, node_models, plan_fetches
from ._transfer import staged_bytes

TERMINAL = frozenset({"done", "failed", "cancelled"})
#: Downloads that may wait for a slot; past it a start is refused (429).
MAX_WAITING: Final = 64
#: Plans (metadata reads over HTTP, in threads) under way at once.
PLANNING: Final = 4
#: The longest line read from a child (its events are short).
MAX_LINE: Final = 1 << 20


#: The module a Hub download's child runs.
HUB_JOB: Final = "inline_host.hub._job"


class PlannedFile(Protocol):
    """One file an import brings (``inline_host.importers.ModelFile``)."""

    @property
    def path(self) -> str: ...
    @property
    def size(self) -> int | None: ...


class PlannedImport(Protocol):
    """What the service reads of an importer (``inline_host.importers.Importer``): where the
    model lands, what it fetches, its weight files (read from their headers, not fetched) and
    where its files wait until all are there."""

    @property
    def source(self) -> str: ...
    @property
    def dest(self) -> Path: ...
    def files(self) -> Sequence[PlannedFile]: ...
    def weights(self) -> Sequence[object]: ...
    def stage(self) -> Path: ...


@dataclass(frozen=True, slots=True)
class ImportSources:
    """The sources beyond the Hub, handed in from the top. ``plan(source, task, models_dir)``
    is the importer of a source (metadata only; ``SourceError`` for a bad one); ``job`` the
    module a download's child runs (``python -m JOB PARENT_PID``): it reads
    ``{"source", "task", "modelsDir"}`` from stdin and writes ``_job``'s events."""

    plan: Callable[[str, str | None, Path], PlannedImport]
    job: str


class DownloadRefused(Exception):
    """A request the service cannot start: names what is wrong. ``status`` is the HTTP status;
    ``retry_after`` the seconds a 429 suggests waiting."""

    def __init__(self, status: int, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


@dataclass
class Download:
    """One download: what it fetches, how far it got, how it ended."""

    id: str
    source: str
    fetches: list[Fetch]
    models_dir: Path
    plan: ImportPlan | None = None
    state: str = "queued"
    error: str | None = None
    current: int | None = None
    finished: set[int] = field(default_factory=set)
    started_at: float = field(default_factory=time.time)
    proc: subprocess.Popen[bytes] | None = None
    scope: anyio.CancelScope | None = None
    #: An import through an importer: where the model lands, where its files are staged, and
    #: the child's module and job (None: a Hub download, whose job is built from the fetches).
    dest: Path | None = None
    stage: Path | None = None
    module: str = HUB_JOB
    job: dict[str, Any] | None = None

    def _done_bytes(self, i: int, f: Fetch) -> int:
        if i in self.finished or (self.state == "done"):
            return f.size or (f.dest.stat().st_size if f.dest.is_file() else 0)
        if i != self.current:
            return 0
        if self.stage is not None:  # the importer's stage: <path>.incomplete, then <path>
            for staged in (self.stage / f"{f.path}.incomplete", self.stage / f.path):
                with contextlib.suppress(OSError):
                    return staged.stat().st_size
            return 0
        return staged_bytes(raw_staging(f.repo, self.models_dir), f.path)

    def view(self) -> dict[str, Any]:
        """The ``GET /v1/downloads/{id}`` answer."""
        files = []
        for i, f in enumerate(self.fetches):
            state = ("done" if i in self.finished or self.state == "done" else
                     "downloading" if i == self.current and self.state == "running" else
                     "waiting")  # fmt: skip
            files.append({"path": f.path, "repo": f.repo, "dest": str(f.dest),
                          "bytesDone": self._done_bytes(i, f), "bytesTotal": f.size,
                          "state": state})  # fmt: skip
        dest = self.plan.dest if self.plan is not None else self.dest
        return {
            "downloadId": self.id,
            "source": self.source,
            "state": self.state,
            "dest": None if dest is None else str(dest),
            "bytesDone": sum(f["bytesDone"] for f in files),
            "bytesTotal": sum(f.size or 0 for f in self.fetches),
            "files": files,
            "error": self.error,
            "createdAt": self.started_at,
        }


class DownloadService:
    """Starts, queues, follows and cancels downloads. Owned by the app's lifespan (``run``)."""

    def __init__(self, settings: Settings, sources: ImportSources | None = None) -> None:
        self.settings = settings
        #: The sources beyond the Hub (None: only ``hf:`` sources and nodes).
        self.sources = sources
        self.downloads: dict[str, Download] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self._slots: anyio.Semaphore | None = None
        self._planning: anyio.CapacityLimiter | None = None

    async def run(self, tg: anyio.abc.TaskGroup) -> None:
        """Serve from now on; children are watched in ``tg``."""
        self._slots = anyio.Semaphore(self.settings.max_downloads)
        self._planning = anyio.CapacityLimiter(PLANNING)
        self._tg = tg

    async def stop(self) -> None:
        """Stop every child (its staged bytes stay, to resume) and every queued download."""
        for d in self.downloads.values():
            if d.state in ("queued", "running"):
                d.state = "cancelled"
                if d.scope is not None and d.proc is None:
                    d.scope.cancel()
                if d.proc is not None:
                    await _end(d.proc)

    # starting -----------------------------------------------------------------------------
    async def start(
        self,
        source: str | None,
        node: str | None,
        *,
        token_secret: str | None = None,
        task: str | None = None,
    ) -> Download:
        """Plan (metadata only, off the event loop) and queue a download. ``task`` is the kind
        of model a source is (a category: ``inline models import --as``)."""
        if (source is None) == (node is None):
            raise DownloadRefused(
                422, 'give exactly one of "source" (hf:ORG/NAME, url:..., file:...) or "node"'
            )
        if task is not None and source is None:
            raise DownloadRefused(422, '"task" says what kind of model a "source" is: give one')
        if self._tg is None or self._planning is None:
            raise DownloadRefused(503, "the downloads service is not running")
        label = source if source is not None else f"node:{node}"
        for d in self.downloads.values():
            if d.source == label and d.state not in TERMINAL:
                return d  # the same download is under way: attach to it
        waiting = sum(d.state == "queued" for d in self.downloads.values())
        if waiting >= MAX_WAITING:
            raise DownloadRefused(
                429,
                f"{waiting} downloads are waiting already ({self.settings.max_downloads} run at "
                "once, INLINE_MAX_DOWNLOADS): start this one when they are done",
                retry_after=30,
            )
        models_dir = self.settings.models_dir
        if source is not None and self.sources is not None and not _is_hub(source):
            made = await self._plan_import(label, source, task, token_secret)
            return self._queue(made)
        plan: ImportPlan | None = None
        try:
            if source is not None:
                hub_source = parse_source(source)
                token = resolve_token(self.settings.data_dir, token_secret)
                plan = await anyio.to_thread.run_sync(
                    lambda: plan_import(
                        hub_source,
                        models_dir,
                        category=task,
                        token=token,
                        ignores=self.settings.hf_ignore,
                        timeout=self.settings.hub_timeout,
                    ),
                    limiter=self._planning,
                )
                fetches = pending(plan, models_dir)
            else:
                assert node is not None
                everything = plan_fetches(node_models(node), models_dir, everything=False)
                fetches = [f for f in everything if not is_present(f)]
        except HubError as exc:
            text = str(exc)
            status = 403 if "gated" in text else 404 if "no such" in text else 422
            raise DownloadRefused(status, text) from None
        except PullError as exc:
            raise DownloadRefused(404, str(exc)) from None
        return self._queue(Download(_new_id(), label, fetches, models_dir, plan))

    async def _plan_import(
        self, label: str, source: str, task: str | None, token_secret: str | None
    ) -> Download:
        """A download of ``source`` through its importer: its files sized, its place known."""
        assert self.sources is not None
        if token_secret is not None:
            raise DownloadRefused(422, f'"tokenSecret" names a Hub token: {source} takes none')
        models_dir, sources = self.settings.models_dir, self.sources

        def plan() -> Download:
            importer = sources.plan(source, task, models_dir)
            dest = importer.dest  # its category: a SourceError when the source cannot tell
            if not importer.weights():  # refused now, not after a child started
                raise SourceError(f"{importer.source}: no weight files to import: not a model")
            fetches = [Fetch(f.path, importer.source, f.path, "", dest / f.path, f.size)
                       for f in importer.files()]  # fmt: skip
            job = {"source": source, "task": task, "modelsDir": str(models_dir)}
            return Download(_new_id(), label, fetches, models_dir, dest=dest,
                            stage=importer.stage(), module=sources.job, job=job)  # fmt: skip

        try:
            return await anyio.to_thread.run_sync(plan, limiter=self._planning)
        except SourceError as exc:  # the user's input names nothing importable
            raise DownloadRefused(422, str(exc)) from None
        except HubError as exc:  # the source could not be read (unreachable, refused)
            raise DownloadRefused(502, str(exc)) from None

    def _queue(self, made: Download) -> Download:
        """Queue ``made``, unless the same download started while it was planned."""
        assert self._tg is not None
        for d in self.downloads.values():
            if d.source == made.source and d.state not in TERMINAL:
                return d  # started while this one was planned
        self.downloads[made.id] = made
        self._tg.start_soon(self._follow, made)
        return made

    async def _follow(self, d: Download) -> None:
        """Wait for a slot (``queued``), then run the download's child to its end."""
        assert self._slots is not None
        with anyio.CancelScope() as scope:
            d.scope = scope
            if d.state != "queued":
                return
            async with self._slots:
                if d.state == "queued":
                    await self._run(d)

    async def _run(self, d: Download) -> None:
        job = d.job or {"modelsDir": str(d.models_dir),
                        "fetches": [fetch_to_json(f) for f in d.fetches],
                        "plan": plan_to_json(d.plan) if d.plan is not None else None,
                        "timeout": self.settings.hub_timeout}  # fmt: skip
        try:
            d.models_dir.mkdir(parents=True, exist_ok=True)
            proc = spawn_job(d.module)
        except OSError as exc:
            d.state, d.error = "failed", f"cannot start the download: {exc.strerror or exc}"
            return
        d.proc = proc
        d.state = "running"
        assert proc.stdin is not None and proc.stdout is not None
        try:
            await _send_all(proc.stdin.fileno(), (json.dumps(job) + "\n").encode())
            await _read_lines(proc.stdout.fileno(), lambda line: self._event(d, line))
            code = await _wait(proc)
        except OSError as exc:  # the child went away before it read its job
            code = await _wait(proc)
            d.error = d.error or f"the download stopped: {exc.strerror or exc}"
        finally:
            with anyio.CancelScope(shield=True):
                if proc.poll() is None:
                    await _end(proc)
            proc.stdin.close()  # its end of the watch: the child is gone by now
            proc.stdout.close()
        if d.state == "running":
            if code == 0 and d.error is None:
                d.state = "done"
            else:
                d.state = "failed"
                d.error = d.error or f"the download stopped (exit {code})"

    @staticmethod
    def _event(d: Download, line: str) -> None:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            return
        match event.get("event"):
            case "start":
                d.current = int(event["index"])
            case "done":
                d.finished.add(int(event["index"]))
            case "error":
                d.error = str(event.get("message"))

    # reading and cancelling ---------------------------------------------------------------
    def get(self, download_id: str) -> Download:
        d = self.downloads.get(download_id)
        if d is None:
            raise DownloadRefused(404, f"no download '{download_id}'")
        return d

    async def cancel(self, download_id: str) -> Download:
        """Stop a download (what it staged stays, so the next one resumes), or take a queued
        one out of the queue; forget a finished one."""
        d = self.get(download_id)
        if d.state in TERMINAL:
            self.downloads.pop(d.id, None)
            return d
        d.state = "cancelled"
        if d.proc is not None:
            await _end(d.proc)
        elif d.scope is not None:
            d.scope.cancel()
        return d


#: How long a stopped child has to exit before it is killed.
STOP_GRACE = 10.0


def _new_id() -> str:
    return "dl_" + secrets.token_hex(6)


def _is_hub(source: str) -> bool:
    """Whether ``source`` is planned here: ``hf:``, or no prefix at all (which the Hub's
    parser names as it always did)."""
    return source.startswith("hf:") or ":" not in source


def spawn_job(module: str = HUB_JOB) -> subprocess.Popen[bytes]:
    """Start a download's child (``python -m MODULE PARENT_PID``): no inherited descriptor but
    its pipes (``close_fds``: never the host's listening socket, whatever the event loop's own
    spawning does), its stdin kept open as the child's tie to this process. Called on the
    event loop's thread, which lives as long as the host (the thread the child's parent-death
    signal follows)."""
    return subprocess.Popen(
        [sys.executable, "-m", module, str(os.getpid())],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        close_fds=True,
    )  # fmt: skip


async def _send_all(fd: int, data: bytes) -> None:
    """Write ``data`` to a pipe without blocking the event loop."""
    os.set_blocking(fd, False)
    view = memoryview(data)
    while view:
        await anyio.wait_writable(fd)
        with contextlib.suppress(BlockingIOError):
            view = view[os.write(fd, view) :]


async def _read_lines(fd: int, on_line: Callable[[str], None]) -> None:
    """Hand each line the child writes to ``on_line``, until its stdout ends."""
    os.set_blocking(fd, False)
    buffer = b""
    while True:
        await anyio.wait_readable(fd)
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            continue
        if not chunk:
            return
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            on_line(line.decode("utf-8", "replace"))
        if len(buffer) > MAX_LINE:
            buffer = b""  # not an event of ours: dropped


async def _wait(proc: subprocess.Popen[bytes]) -> int:
    return await anyio.to_thread.run_sync(proc.wait, abandon_on_cancel=True)


async def _end(proc: subprocess.Popen[bytes]) -> None:
    """Stop a download's child and wait until it is gone (its stage lock with it)."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    with anyio.move_on_after(STOP_GRACE):
        await _wait(proc)
        return
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    await _wait(proc)
