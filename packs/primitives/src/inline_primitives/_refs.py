"""Portable model references: what ``load/*`` nodes output and any pack may consume.

A reference is plain data (the resolved path, the family, the component kind), not a loaded
model, so it can cross from the primitives pack to another pack's worker, which then loads (and
keeps) the weights itself through this library.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import msgspec

from ._families import KIND_LABELS, detect
from ._header import DTYPE_BYTES

#: Port kind (the contract's) -> component kind (ours).
PORT_KINDS: Final = {"model": "diffusion", "vae": "vae", "text-encoder": "text_encoder"}
#: The models dir category each component kind is picked from.
CATEGORIES: Final = {"diffusion": "diffusion_models", "vae": "vae", "text_encoder": "text_encoders"}


class ModelRef(msgspec.Struct, frozen=True, kw_only=True):
    """A checked model file or folder: ``{kind, arch, file}`` as the contract's handle, plus what
    its header told (parameter count, bytes, dtype, layout)."""

    kind: str
    arch: str
    file: str
    label: str
    layout: str
    params: int
    bytes: int
    dtype: str


_CHECKED: dict[tuple[Any, ...], ModelRef] = {}


def inspect_model(path: Path, kind: str) -> ModelRef:
    """Recognise and check the weights at ``path`` (headers only); raise ``ModelFileError``.
    Remembered per file content stamp (path, size, mtime): a warm render re-checks nothing."""
    from ._loading import check, ensure_imports, file_key

    ensure_imports()
    stamp = (kind, *file_key(path))
    known = _CHECKED.get(stamp)
    if known is not None:
        return known
    det = detect(path, kind)
    check(det)
    nbytes = sum(i.numel * DTYPE_BYTES.get(i.dtype, 1) for i in det.keys.values())
    ref = ModelRef(
        kind=kind,
        arch=det.component.family,
        file=str(path),
        label=det.label,
        layout=det.layout,
        params=sum(i.numel for i in det.keys.values()),
        bytes=nbytes,
        dtype=det.header.dtype,
    )
    _CHECKED[stamp] = ref
    return ref


def as_ref(value: Any, kind: str, what: str) -> ModelRef:
    """A handle received on an input port as a ``ModelRef`` of ``kind``; raises ``ValueError``
    ``"<what> input is not a loadable <kind> handle."`` for anything else."""
    if isinstance(value, ModelRef):
        ref = value
    else:
        try:
            ref = msgspec.convert(value, ModelRef)
        except (msgspec.ValidationError, TypeError):
            ref = None
    if ref is None or ref.kind != kind:
        raise ValueError(f"{what} input is not a loadable {KIND_LABELS[kind]} handle.")
    return ref
