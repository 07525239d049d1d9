"""One download, run as its own process by the downloads service (so that cancelling it is
stopping the process, and the host's event loop never waits on a transfer).

Run as ``python -m inline_host.hub._job PARENT_PID``. Reads its job from stdin (one line of
JSON: the fetches, and for an import its plan); writes one JSON line per event to stdout:
``{"event": "start"|"done", "index": i}``, then ``{"event": "finished", "dest": ...}`` or
``{"event": "error", "message": ...}``.

It dies with the host: the kernel sends it SIGTERM when its parent dies (``PR_SET_PDEATHSIG``,
Linux), and wherever that is missing, its stdin, which the host holds open after the job line,
reaching its end (the host is gone, even killed) ends it too; a parent gone before either was
set up is seen by its pid. What was staged stays, so the next download resumes it.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Final

from ._hf import HubSource, ImportPlan, RemoteFile
from ._import import finalize, raw_staging
from ._pull import HUB_TIMEOUT, STAGING, Fetch, PullError, fetch
from ._transfer import disk_problem, release_staging


def plan_to_json(plan: ImportPlan) -> dict[str, Any]:
    """An import plan as the job's JSON (with its token: the job reads it from stdin)."""
    return {
        "repo": plan.source.repo,
        "revision": plan.source.revision,
        "commit": plan.commit,
        "category": plan.category,
        "dest": str(plan.dest),
        "files": [[f.path, f.size, f.sha256] for f in plan.files],
        "skipped": list(plan.skipped),
        "token": plan.token,
    }


def plan_from_json(doc: dict[str, Any]) -> ImportPlan:
    """The plan back from ``plan_to_json``."""
    return ImportPlan(
        HubSource(doc["repo"], doc["revision"]),
        doc["commit"],
        doc["category"],
        Path(doc["dest"]),
        tuple(RemoteFile(*entry) for entry in doc["files"]),
        tuple(doc["skipped"]),
        None,
        doc.get("token"),
    )


def fetch_to_json(f: Fetch) -> dict[str, Any]:
    return {"label": f.label, "repo": f.repo, "path": f.path, "revision": f.revision,
            "dest": str(f.dest), "size": f.size, "sha256": f.sha256}  # fmt: skip


#: The exit status of a child whose host went away.
ORPHANED: Final = 3
_PR_SET_PDEATHSIG: Final = 1


def die_with_parent(parent: int) -> None:
    """Ask the kernel for SIGTERM when the parent dies; exit now if it died already."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(ORPHANED)


def exit_at_end_of(fd: int) -> None:
    """Watch the pipe ``fd`` (the host's end of it stays open while the host lives) in a
    thread and exit the process when it ends. Read raw: a buffered reader's lock held by this
    thread would abort the interpreter's shutdown."""

    def watch() -> None:
        with contextlib.suppress(OSError):
            while os.read(fd, 4096):
                pass
        os._exit(ORPHANED)

    threading.Thread(target=watch, name="host-watch", daemon=True).start()


def _say(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def read_job(argv: list[str]) -> dict[str, Any] | None:
    """A download child's start: die with the host (its pid in ``argv``), read the job line
    from stdin, then exit when stdin ends; the job, or None when the host went away first."""
    if argv:
        die_with_parent(int(argv[0]))
    line = sys.stdin.buffer.readline()
    if not line:
        return None  # the host went away before it sent the job
    exit_at_end_of(sys.stdin.fileno())
    return json.loads(line)


def main(argv: list[str]) -> int:
    doc = read_job(argv)
    if doc is None:
        return ORPHANED
    models_dir = Path(doc["modelsDir"])
    fetches = [Fetch(d["label"], d["repo"], d["path"], d["revision"], Path(d["dest"]), d["size"],
                     d.get("sha256")) for d in doc["fetches"]]  # fmt: skip
    plan = plan_from_json(doc["plan"]) if doc.get("plan") else None
    token = plan.token if plan is not None else None
    timeout = float(doc.get("timeout") or HUB_TIMEOUT)  # the host's INLINE_HUB_TIMEOUT
    try:
        for i, f in enumerate(fetches):
            _say({"event": "start", "index": i})
            fetch(f, models_dir, token=token, timeout=timeout)
            _say({"event": "done", "index": i})
        if plan is not None:
            finalize(plan, models_dir)
        for repo in {f.repo for f in fetches}:
            release_staging(raw_staging(repo, models_dir))
        staging = models_dir / STAGING
        if staging.is_dir() and not any(staging.iterdir()):
            staging.rmdir()
    except PullError as exc:
        _say({"event": "error", "message": str(exc)})
        return 1
    except OSError as exc:  # moving the finished folder into place: a full disk...
        where = Path(exc.filename) if exc.filename else models_dir / "x"
        _say({"event": "error", "message": disk_problem(exc, where)})
        return 1
    _say({"event": "finished", "dest": str(plan.dest) if plan else None})
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
