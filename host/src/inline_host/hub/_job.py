"""One download, run as its own process by the downloads service (so that cancelling it is
stopping the process, and the host's event loop never waits on a transfer).

Reads its job from stdin (JSON: the fetches, and for an import its plan); writes one JSON line
per event to stdout: ``{"event": "start"|"done", "index": i}``, then ``{"event": "finished",
"dest": ...}`` or ``{"event": "error", "message": ...}``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ..models._pull import STAGING, Fetch, PullError, fetch
from ..models._transfer import release_staging
from ._hf import HubSource, ImportPlan, RemoteFile
from ._import import finalize, raw_staging


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


def _say(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def main() -> int:
    doc = json.loads(sys.stdin.read())
    models_dir = Path(doc["modelsDir"])
    fetches = [Fetch(d["label"], d["repo"], d["path"], d["revision"], Path(d["dest"]), d["size"],
                     d.get("sha256")) for d in doc["fetches"]]  # fmt: skip
    plan = plan_from_json(doc["plan"]) if doc.get("plan") else None
    token = plan.token if plan is not None else None
    try:
        for i, f in enumerate(fetches):
            _say({"event": "start", "index": i})
            fetch(f, models_dir, token=token)
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
    _say({"event": "finished", "dest": str(plan.dest) if plan else None})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
