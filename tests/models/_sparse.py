"""Sparse safetensors files at real scale, written from the ``*.spec.json`` headers (no disk)."""

from __future__ import annotations

import json
import os
import struct
from math import prod
from pathlib import Path

SPECS = Path(__file__).resolve().parents[1] / "data" / "zimage"
DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4}


def write_sparse(spec_file: Path, dest: Path) -> Path:
    """A safetensors file with the spec's header and its full size, data left as a hole."""
    spec = json.loads(spec_file.read_text())
    items = sorted(spec["tensors"].items(), key=lambda kv: (-DTYPE_BYTES[kv[1]["dtype"]], kv[0]))
    header: dict[str, object] = {}
    if spec.get("metadata"):
        header["__metadata__"] = spec["metadata"]
    offset = 0
    for name, t in items:
        size = prod(t["shape"]) * DTYPE_BYTES[t["dtype"]]
        header[name] = {
            "dtype": t["dtype"],
            "shape": t["shape"],
            "data_offsets": [offset, offset + size],
        }
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)))
        fh.write(raw)
    os.truncate(dest, 8 + len(raw) + offset)
    return dest


def write_all(models_dir: Path) -> dict[str, Path]:
    """The three Comfy-Org files under ``models_dir`` (ComfyUI layout), by spec name."""
    written = {}
    for spec_file in sorted(SPECS.glob("*.spec.json")):
        rel = spec_file.name.removesuffix(".spec.json").replace("__", "/")
        written[rel] = write_sparse(spec_file, models_dir / rel)
    return written
