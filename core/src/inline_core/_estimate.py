"""Size estimates from safetensors headers: dtype x shape, never reading the weights.

A single file is one component; a folder is one component per diffusers sub-model
(``transformer/``, ``text_encoder/``, ``vae/``...) or, without sub-models, one component of all
its shards. A component's role comes from its folder name or, for single files, its key names.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final

from ._policy import Component, Role

DTYPE_SIZES: Final = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
    "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8,
}  # fmt: skip
MAX_HEADER: Final = 100 * 1024 * 1024
#: More elements than any tensor holds (and than a 64-bit count carries).
MAX_ELEMENTS: Final = 1 << 63
FOLDER_ROLES: Final[dict[str, Role]] = {
    "transformer": "diffusion", "unet": "diffusion", "diffusion_models": "diffusion",
    "text_encoder": "text-encoder", "text_encoder_2": "text-encoder",
    "text_encoders": "text-encoder", "vae": "vae",
}  # fmt: skip


class HeaderError(ValueError):
    """A file that is not a readable safetensors file."""


def read_header(path: Path) -> dict[str, Any]:
    """The JSON header of a safetensors file (tensor name -> dtype, shape, offsets)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(8)
            if len(raw) < 8:
                raise HeaderError(f"'{path}' is too short to be a safetensors file")
            (size,) = struct.unpack("<Q", raw)
            if size > MAX_HEADER:
                raise HeaderError(f"'{path}' announces a {size}-byte header: not safetensors")
            raw_header = fh.read(size)
            have = os.fstat(fh.fileno()).st_size
        if len(raw_header) < size:
            raise HeaderError(
                f"'{path}' is truncated: its header announces {size} bytes, the file holds "
                f"{have} in all; download it again"
            )
        header = json.loads(raw_header)
    except OSError as exc:
        raise HeaderError(f"Cannot read '{path}': {exc.strerror}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise HeaderError(f"'{path}' has no valid safetensors header: {exc}") from exc
    if not isinstance(header, dict):
        raise HeaderError(f"'{path}' has no valid safetensors header")
    _check_shapes(path, header)
    need = 8 + size + max(_ends(header), default=0)
    if need > have:
        raise HeaderError(
            f"'{path}' is truncated: its tensors need {need} bytes, the file has {have} "
            f"({need - have} missing); download it again"
        )
    return header


def _check_shapes(path: Path, header: dict[str, Any]) -> None:
    """Every tensor's ``shape`` is a list of whole numbers >= 0 (a string, an object or a negative
    size is a broken or hostile header, never a size)."""
    for name, info in header.items():
        if name == "__metadata__" or not isinstance(info, dict) or "shape" not in info:
            continue
        shape = info["shape"]
        if not _sane_shape(shape):
            shown = json.dumps(shape)
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            raise HeaderError(
                f"'{path}' has no valid safetensors header: tensor {name[:200]!r} has shape "
                f"{shown}, expected a list of whole numbers >= 0 (under 2^63 elements)"
            )


def _sane_shape(shape: Any) -> bool:
    """A list of whole numbers >= 0 with fewer than ``MAX_ELEMENTS`` elements in all."""
    if not isinstance(shape, list):
        return False
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
        return False
    if 0 in shape:
        return True
    elements = 1
    for n in shape:  # stops as soon as it is too many (a hostile shape may be long)
        elements *= n
        if elements >= MAX_ELEMENTS:
            return False
    return True


def _ends(header: dict[str, Any]) -> Iterable[int]:
    for name, info in header.items():
        offsets = (
            info.get("data_offsets") if isinstance(info, dict) and name != "__metadata__" else None
        )
        if isinstance(offsets, list) and len(offsets) == 2 and isinstance(offsets[1], int):
            yield offsets[1]


def count(header: dict[str, Any]) -> tuple[int, int]:
    """(parameters, bytes) of the tensors a header lists."""
    params = nbytes = 0
    for name, info in header.items():
        if name == "__metadata__" or not isinstance(info, dict):
            continue
        n = math.prod(info.get("shape") or [1])
        params += n
        nbytes += n * DTYPE_SIZES.get(str(info.get("dtype")), 2)
    return params, nbytes


def guess_role(keys: Iterable[str]) -> Role:
    """A component's role from its tensor names (original, ComfyUI and diffusers layouts)."""
    keys = list(keys)
    joined = "\n".join(keys[:4000])
    if any(k.startswith(("decoder.", "encoder.", "first_stage_model.")) for k in keys) and (
        "conv_in" in joined
    ):
        return "vae"
    if "embed_tokens" in joined or "shared.weight" in joined or "token_embedding" in joined:
        return "text-encoder"
    if any(
        s in joined
        for s in (
            "x_embedder",
            "noise_refiner",
            "double_blocks",
            "input_blocks",
            "transformer_blocks",
            "adaLN",
            "time_embed",
        )
    ):
        return "diffusion"
    return "other"


def estimate_paths(paths: Sequence[Path]) -> list[Component]:
    """One component per file, or per sub-model of a folder."""
    out: list[Component] = []
    for path in paths:
        if path.is_dir():
            out.extend(_folder(path))
        else:
            header = read_header(path)
            params, nbytes = count(header)
            out.append(Component(str(path), guess_role(header), params, nbytes))
    return out


def _folder(path: Path) -> list[Component]:
    groups: dict[Path, list[Path]] = {}
    for f in sorted(path.rglob("*.safetensors")):
        rel = f.relative_to(path)
        key = path / rel.parts[0] if len(rel.parts) > 1 else path
        groups.setdefault(key, []).append(f)
    if not groups:
        raise HeaderError(f"'{path}' holds no .safetensors files")
    out = []
    for group, files in groups.items():
        params = nbytes = 0
        keys: list[str] = []
        for f in files:
            header = read_header(f)
            p, b = count(header)
            params, nbytes = params + p, nbytes + b
            keys.extend(k for k in header if k != "__metadata__")
        role = FOLDER_ROLES.get(group.name) or guess_role(keys)
        out.append(Component(str(group), role, params, nbytes))
    return out
