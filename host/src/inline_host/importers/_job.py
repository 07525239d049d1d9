"""One import through an importer, run as its own process by the downloads service (a
``/v1/downloads`` of a ``url:``, ``file:`` or a plugin's source; ``hf:`` keeps the Hub's job).

Run as ``python -m inline_host.importers._job PARENT_PID``. Reads its job from stdin (one line
of JSON: ``{"source", "task", "modelsDir"}``) and writes the Hub job's events, one JSON line
each: ``{"event": "start"|"done", "index": i}`` (``i`` a file of ``importer.files()``), then
``{"event": "finished", "dest": ...}`` or ``{"event": "error", "message": ...}``.

It dies with the host as the Hub's job does (``hub.read_job``);
what it staged stays, so the next download of the source resumes it. Its settings are the
host's environment (``INLINE_*``, inherited), but for the models dir, which the job names.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Final

from ..hub import HubError, disk_problem, read_job
from ._base import FileProgress
from ._plugins import importer_for

#: The exit status of a child whose host went away (the Hub job's).
ORPHANED: Final = 3


def _say(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


class FileEvents:
    """A fetch's progress as "file i started / finished" events, each told once."""

    def __init__(self) -> None:
        self.current: int | None = None
        self.done: set[int] = set()

    def tell(self, p: FileProgress) -> None:
        if p.index != self.current:
            self.finish()
            self.current = p.index
            _say({"event": "start", "index": p.index})
        if p.total is not None and p.done >= p.total:
            self.finish()

    def finish(self) -> None:
        """The current file is in place."""
        if self.current is not None and self.current not in self.done:
            self.done.add(self.current)
            _say({"event": "done", "index": self.current})


def main(argv: list[str]) -> int:
    doc = read_job(argv)
    if doc is None:
        return ORPHANED  # the host went away before it sent the job
    models_dir = Path(doc["modelsDir"])
    events = FileEvents()
    try:
        importer = importer_for(doc["source"], task=doc.get("task"), models_dir=models_dir)
        dest = importer.fetch(progress=events.tell)
    except HubError as exc:
        _say({"event": "error", "message": str(exc)})
        return 1
    except OSError as exc:  # moving the finished folder into place: a full disk...
        where = Path(exc.filename) if exc.filename else models_dir / "x"
        _say({"event": "error", "message": disk_problem(exc, where)})
        return 1
    events.finish()
    _say({"event": "finished", "dest": str(dest)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
