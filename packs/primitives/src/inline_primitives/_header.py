"""Reading safetensors headers without reading tensor data (and without torch).

A header gives every tensor's name, dtype, shape and byte range: enough to recognise a model's
family, infer its architecture, count its parameters and refuse a truncated file before any load.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import Any, Final

from ._errors import NotSafetensors

DTYPE_BYTES: Final = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
    "U16": 2, "U32": 4, "U64": 8, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
}  # fmt: skip
HEADER_LIMIT: Final = 100 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One tensor as its header describes it."""

    dtype: str
    shape: tuple[int, ...]
    file: Path

    @property
    def numel(self) -> int:
        """Number of elements."""
        return prod(self.shape)


@dataclass(frozen=True)
class WeightsHeader:
    """The merged headers of a weights location (one file, or the shards of a folder)."""

    location: Path
    files: tuple[Path, ...]
    tensors: dict[str, TensorInfo]
    metadata: dict[str, str]

    def shape(self, key: str) -> tuple[int, ...] | None:
        """The shape of ``key``, or None when absent."""
        info = self.tensors.get(key)
        return info.shape if info is not None else None

    @property
    def params(self) -> int:
        """Total number of parameters."""
        return sum(t.numel for t in self.tensors.values())

    @property
    def nbytes(self) -> int:
        """Total bytes of tensor data."""
        return sum(t.numel * DTYPE_BYTES.get(t.dtype, 1) for t in self.tensors.values())

    @property
    def dtype(self) -> str:
        """The dtype holding most of the bytes."""
        by: dict[str, int] = {}
        for t in self.tensors.values():
            by[t.dtype] = by.get(t.dtype, 0) + t.numel
        return max(by, key=lambda d: by[d]) if by else "F32"


def read_file_header(path: Path) -> WeightsHeader:
    """The header of one safetensors file; raises ``NotSafetensors`` naming what is wrong."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise NotSafetensors(path, f"only {size} bytes: not a safetensors file")
            (length,) = struct.unpack("<Q", head)
            if length > HEADER_LIMIT:
                raise NotSafetensors(path, "not a safetensors file (implausible header length)")
            if 8 + length > size:
                raise NotSafetensors(
                    path,
                    f"truncated: its header needs {8 + length} bytes but the file has {size} "
                    "(an interrupted download?)",
                )
            raw = fh.read(length)
    except OSError as exc:
        raise NotSafetensors(path, f"cannot be read: {exc.strerror or exc}") from None
    try:
        doc: dict[str, Any] = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise NotSafetensors(path, "not a safetensors file (its header is not JSON)") from None
    if not isinstance(doc, dict):
        raise NotSafetensors(path, "not a safetensors file (its header is not a JSON object)")
    metadata = doc.pop("__metadata__", None) or {}
    tensors: dict[str, TensorInfo] = {}
    end = 0
    for name, spec in doc.items():
        try:
            dtype = spec["dtype"]
            shape = tuple(int(s) for s in spec["shape"])
            start, stop = (int(o) for o in spec["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise NotSafetensors(path, f"malformed header entry for tensor '{name}'") from None
        if dtype in DTYPE_BYTES and stop - start != prod(shape) * DTYPE_BYTES[dtype]:
            raise NotSafetensors(path, f"tensor '{name}' has {stop - start} bytes for {shape}")
        tensors[name] = TensorInfo(dtype, shape, path)
        end = max(end, stop)
    if 8 + length + end > size:
        raise NotSafetensors(
            path,
            f"truncated: its header declares {8 + length + end} bytes but the file has {size} "
            "(an interrupted download?)",
        )
    return WeightsHeader(path, (path,), tensors, dict(metadata))


def weight_files(folder: Path) -> list[Path]:
    """The safetensors files directly inside ``folder`` (shards included), sorted."""
    return sorted(p for p in folder.iterdir() if p.suffix == ".safetensors" and p.is_file())


def read_header(location: Path) -> WeightsHeader:
    """The header of a single file, or the merged headers of a folder's safetensors shards."""
    if location.is_file():
        if location.suffix.lower() not in (".safetensors", ".sft"):
            raise NotSafetensors(location, "only .safetensors weights are supported")
        return read_file_header(location)
    if not location.is_dir():
        raise NotSafetensors(location, "does not exist")
    files = weight_files(location)
    if not files:
        raise NotSafetensors(location, "this folder holds no .safetensors weights")
    tensors: dict[str, TensorInfo] = {}
    metadata: dict[str, str] = {}
    for f in files:
        part = read_file_header(f)
        tensors.update(part.tensors)
        metadata.update(part.metadata)
    return WeightsHeader(location, tuple(files), tensors, metadata)
