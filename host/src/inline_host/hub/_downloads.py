"""The downloads service behind ``/v1/downloads``: the same downloads as ``inline models import``
and ``inline models pull``, each in its own process, with progress per file.

Progress is read from disk (the staged ``.incomplete`` file of the transfer under way, the
finished files' sizes): nothing is streamed from the child but "file i started/finished". A
cancelled child is waited for, so that the next download of the same files finds their stage
free and resumes it.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from anyio.streams.text import TextReceiveStream

from .._settings import Settings
from ..models._pull import Fetch, PullError, _present, node_models, plan_fetches
from ..models._transfer import staged_bytes
from ._hf import HubError, ImportPlan, parse_source, plan_import, resolve_token
from ._import import pending, raw_staging
from ._job import fetch_to_json, plan_to_json

TERMINAL = frozenset({"done", "failed", "cancelled"})


class DownloadRefused(Exception):
    """A request the service cannot start: names what is wrong. ``status`` is the HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


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
    proc: anyio.abc.Process | None = None

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
    """Starts, follows and cancels downloads. Owned by the app's lifespan (``run``)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.downloads: dict[str, Download] = {}
        self._tg: anyio.abc.TaskGroup | None = None

    async def run(self, tg: anyio.abc.TaskGroup) -> None:
        """Serve from now on; children are watched in ``tg``."""
        self._tg = tg

    async def stop(self) -> None:
        """Stop every running child (its staged bytes stay, to resume)."""
        for d in self.downloads.values():
            if d.proc is not None and d.state == "running":
                d.state = "cancelled"
                await _end(d.proc)

    # starting -----------------------------------------------------------------------------
    async def start(
        self, source: str | None, node: str | None, *, token_secret: str | None = None
    ) -> Download:
        """Plan (metadata only, off the event loop) and start a download."""
        if (source is None) == (node is None):
            raise DownloadRefused(422, 'give exactly one of "source" (hf:ORG/NAME) or "node"')
        label = source if source is not None else f"node:{node}"
        for d in self.downloads.values():
            if d.source == label and d.state not in TERMINAL:
                return d  # the same download is under way: attach to it
        models_dir = self.settings.models_dir
        plan: ImportPlan | None = None
        try:
            if source is not None:
                hub_source = parse_source(source)
                token = resolve_token(self.settings.data_dir, token_secret)
                plan = await anyio.to_thread.run_sync(
                    lambda: plan_import(hub_source, models_dir, token=token)
                )
                fetches = pending(plan, models_dir)
            else:
                assert node is not None
                everything = plan_fetches(node_models(node), models_dir, everything=False)
                fetches = [f for f in everything if not _present(f)]
        except HubError as exc:
            text = str(exc)
            status = 403 if "gated" in text else 404 if "no such" in text else 422
            raise DownloadRefused(status, text) from None
        except PullError as exc:
            raise DownloadRefused(404, str(exc)) from None
        d = Download("dl_" + secrets.token_hex(6), label, fetches, models_dir, plan)
        self.downloads[d.id] = d
        if self._tg is None:
            raise DownloadRefused(503, "the downloads service is not running")
        await self._tg.start(self._follow, d)
        return d

    async def _follow(self, d: Download, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        job = {"modelsDir": str(d.models_dir), "fetches": [fetch_to_json(f) for f in d.fetches],
               "plan": plan_to_json(d.plan) if d.plan is not None else None}  # fmt: skip
        d.models_dir.mkdir(parents=True, exist_ok=True)
        try:
            proc = await anyio.open_process(
                [sys.executable, "-m", "inline_host.hub._job"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            )  # fmt: skip
        except OSError as exc:
            d.state, d.error = "failed", f"cannot start the download: {exc}"
            task_status.started()
            return
        d.proc = proc
        d.state = "running"
        task_status.started()
        assert proc.stdin is not None and proc.stdout is not None
        await proc.stdin.send(json.dumps(job).encode())
        await proc.stdin.aclose()
        buffer = ""
        async for chunk in TextReceiveStream(proc.stdout):
            buffer += chunk
            while "\n" in buffer:
                line, buffer = buffer.split("\n", 1)
                self._event(d, line)
        code = await proc.wait()
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
        """Stop a download (what it staged stays, so the next one resumes); forget a finished
        one."""
        d = self.get(download_id)
        if d.state in TERMINAL:
            self.downloads.pop(d.id, None)
            return d
        d.state = "cancelled"
        if d.proc is not None:
            await _end(d.proc)
        return d


#: How long a stopped child has to exit before it is killed.
STOP_GRACE = 10.0


async def _end(proc: anyio.abc.Process) -> None:
    """Stop a download's child and wait until it is gone (its stage lock with it)."""
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    with anyio.move_on_after(STOP_GRACE):
        await proc.wait()
        return
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    await proc.wait()
