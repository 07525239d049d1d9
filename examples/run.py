"""Run an example graph over HTTP, against a running server (``./scripts/run``), with
``inline-client``: ``.venv/bin/python examples/run.py examples/text_complete.json``.

Streamed text (``text/complete``'s tokens) is printed as it arrives; the target's takes are
saved under ``--out`` (one line each on stderr). A ``{"ref": "path"}`` in the graph is relative
to the graph's folder, as ``inline run`` reads it, and the server resolves it the same way (its
input roots, then its ``examples/``). ``--json`` ends with a summary line for scripts.

Options: ``--url`` (default ``http://127.0.0.1:8848``, or ``INLINE_URL``), ``--token`` (or
``INLINE_TOKEN``), ``--out`` (default ``out``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from inline_client import Client, Delta, GraphInvalid, InlineError, RunFailed

EXTENSIONS = {"image": ".png", "text": ".txt", "mesh": ".glb", "video": ".mp4", "audio": ".wav"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("file", type=Path, help="a run request: {graph, target}")
    parser.add_argument("--url", default=os.environ.get("INLINE_URL", "http://127.0.0.1:8848"))
    parser.add_argument("--token", default=os.environ.get("INLINE_TOKEN"))
    parser.add_argument("--out", type=Path, default=Path("out"))
    parser.add_argument("--json", action="store_true", help="end with a JSON summary line")
    args = parser.parse_args(argv)
    try:
        request = json.loads(args.file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"error: cannot read {args.file}: {exc}", file=sys.stderr)
        return 2
    summary: dict[str, Any] = {"deltas": 0, "text": "", "takes": []}
    try:
        with Client(args.url, token=args.token) as inline:
            run = inline.run(request["graph"], request["target"])
            for event in run.events():
                # the target's text as it streams (its thinking streams too, as output
                # "thinking": the takes hold it)
                if (
                    isinstance(event, Delta)
                    and event.node_id == request["target"]
                    and event.output == "text"
                ):
                    summary["deltas"] += 1
                    summary["text"] += event.text
                    print(event.text, end="", flush=True)
            state = run.wait()
            if summary["deltas"]:
                print()
            args.out.mkdir(parents=True, exist_ok=True)
            for take in state.takes:
                if take.node_id != request["target"]:
                    continue
                data = inline.take_bytes(take.id)
                name = f"{take.node_id}-{take.output or 'out'}-{take.id}"
                path = args.out / (name + EXTENSIONS.get(take.kind, ".bin"))
                path.write_bytes(data)
                print(f"saved {path} ({take.kind}, {len(data)} bytes)", file=sys.stderr)
                summary["takes"].append({"kind": take.kind, "output": take.output,
                                         "path": str(path), "bytes": len(data)})  # fmt: skip
            summary["status"] = state.status
    except GraphInvalid as exc:
        print(f"error: the graph is invalid: {exc}", file=sys.stderr)
        return 2
    except RunFailed as exc:
        print(f"error: the run failed: {exc}", file=sys.stderr)
        return 1
    except InlineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
