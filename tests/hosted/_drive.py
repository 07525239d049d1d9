"""Run in the hosted pack's venv: call one node with a recording Context, print JSON.

argv: node type, JSON params, JSON secrets, prompt (or "").
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from pathlib import Path

import inline_hosted
from inline_sdk import Context, Image


def main() -> None:
    node_type, params, secrets, prompt = sys.argv[1:5]
    spec = next(n for n in inline_hosted.inline_nodes() if n.type == node_type)
    streams: list[list[str]] = []
    ctx = Context(
        node_type=node_type,
        node_id="n",
        models_dir=Path("."),
        assets_dir=Path("."),
        input_roots=[],
        cwd=Path("."),
        emit_progress=lambda *a: None,
        emit_preview=lambda image: None,
        emit_stream=lambda port, text: streams.append([port, text]),
        cancel_event=threading.Event(),
        logger=logging.getLogger("drive"),
        secrets=json.loads(secrets),
    )
    decoded = spec.decode_params(json.loads(params))
    inputs = {"prompt": prompt or None}
    try:
        outputs = spec.invoke(ctx, inputs, decoded)
    except Exception as exc:
        print(json.dumps({"error": {"type": type(exc).__name__, "message": str(exc)}}))
        return
    result = {}
    for port, value in outputs.items():
        if isinstance(value, Image):
            result[port] = {"ext": value.ext, "hex": value.tobytes().hex(), "params": value.params}
        else:
            result[port] = value
    print(json.dumps({"outputs": result, "streams": streams}))


if __name__ == "__main__":
    main()
