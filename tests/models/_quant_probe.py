"""Loads one model file on the CPU through the primitives library with a given placement, in a
fresh process, then frees it; prints the anonymous memory (``RssAnon``) it added, as JSON."""

import gc
import json
import sys
from pathlib import Path


def rss_anon() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


def main(path: str, dtype: str, quantization: str) -> None:
    import torch  # noqa: F401  (imported before measuring)
    from inline_primitives import detect
    from inline_primitives._loading import (
        Placement,
        ensure_imports,
        free_memory,
        load_placed,
        trim_heap,
    )

    ensure_imports()  # diffusers and torchao: import costs are not weights
    import torchao.quantization  # noqa: F401

    det = detect(Path(path), "diffusion")
    gc.collect()
    trim_heap()
    before = rss_anon()
    module = load_placed(det, Placement("cpu", dtype, quantization=quantization))
    gc.collect()
    trim_heap()
    loaded = rss_anon() - before
    del module  # what a slot switching to another checkpoint does
    free_memory()
    print(json.dumps({"loaded": loaded, "after_free": rss_anon() - before}))


if __name__ == "__main__":
    main(*sys.argv[1:4])
