"""The downloads service behind ``/v1/downloads``: the same downloads as ``inline models import``
and ``inline models pull``, each in its own process, with progress per file.

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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.abc

from .._settings import Settings
from ._hf import HubError, ImportPlan, parse_source, plan_import, resolve_token
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

    def _done_bytes(self, i: int, f: Fetch) -> int:
        if i in self.finished or (self.state == "done"):
            return f.size or (f.dest.stat().st_size if f.dest.is_file() else 0)
        if i != self.current:
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
        dest = str(self.plan.dest) if self.plan is not None else None
        return {
            "downloadId": self.id,
            "source": self.source,
            "state": self.state,
            "dest": dest,
            "bytesDone": sum(f["bytesDone"] for f in files),
            "bytesTotal": sum(f.size or 0 for f in self.fetches),
            "files": files,
            "error": self.error,
            "createdAt": self.started_at,
        }


class DownloadService:
    """Starts, queues, follows and cancels downloads. Owned by the app's lifespan (``run``)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
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
        self, source: str | None, node: str | None, *, token_secret: str | None = None
    ) -> Download:
        """Plan (metadata only, off the event loop) and queue a download."""
        if (source is None) == (node is None):
            raise DownloadRefused(422, 'give exactly one of "source" (hf:ORG/NAME) or "node"')
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
        plan: ImportPlan | None = None
        try:
            if source is not None:
                hub_source = parse_source(source)
                token = resolve_token(self.settings.data_dir, token_secret)
                plan = await anyio.to_thread.run_sync(
                    lambda: plan_import(
                        hub_source,
                        models_dir,
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
        for d in self.downloads.values():
            if d.source == label and d.state not in TERMINAL:
                return d  # started while this one was planned
        d = Download("dl_" + secrets.token_hex(6), label, fetches, models_dir, plan)
        self.downloads[d.id] = d
        self._tg.start_soon(self._follow, d)
        return d

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
        job = {"modelsDir": str(d.models_dir), "fetches": [fetch_to_json(f) for f in d.fetches],
               "plan": plan_to_json(d.plan) if d.plan is not None else None,
               "timeout": self.settings.hub_timeout}  # fmt: skip
        try:
            d.models_dir.mkdir(parents=True, exist_ok=True)
            proc = spawn_job()
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


def spawn_job() -> subprocess.Popen[bytes]:
    """Start a download's child: no inherited descriptor but its pipes (``close_fds``: never
    the host's listening socket, whatever the event loop's own spawning does), its stdin kept
    open as the child's tie to this process. Called on the event loop's thread, which lives as
    long as the host (the thread the child's parent-death signal follows)."""
    return subprocess.Popen(
        [sys.executable, "-m", "inline_host.hub._job", str(os.getpid())],
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
