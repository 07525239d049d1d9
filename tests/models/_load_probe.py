"""Loads a model through the primitives library and reports what it cost (run in a pack venv).

``python _load_probe.py KIND PATH`` prints JSON: the detection, parameter count, seconds, and the
growth of anonymous memory (``RssAnon``: weights read into RAM would show there; mapped file
pages do not).
"""

import json
import sys
import time
from pathlib import Path


def rss_anon_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main(kind: str, path: str) -> None:
    import torch  # noqa: F401  (imported before measuring)
    from inline_primitives import detect, inspect_model
    from inline_primitives._loading import Placement, load

    ref = inspect_model(Path(path), kind)
    before = rss_anon_mb()
    started = time.perf_counter()
    module = load(detect(Path(path), kind), Placement("cpu", None))
    seconds = time.perf_counter() - started
    grown = rss_anon_mb() - before
    params = sum(p.numel() for p in module.parameters())
    print(json.dumps({
        "label": ref.label, "arch": ref.arch, "layout": ref.layout, "params": params,
        "header_params": ref.params, "dtype": str(module.dtype), "seconds": seconds,
        "rss_anon_growth_mb": grown,
    }))  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
