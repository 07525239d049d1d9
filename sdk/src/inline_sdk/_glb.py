"""A binary glTF 2.0 (``.glb``) writer in pure Python (``struct`` and ``array``; no numpy).

One mesh, one node, one scene: ``POSITION`` (float32, with the min/max the spec requires),
``indices`` (uint32 triangles), then optionally ``COLOR_0`` (normalized uint8 RGBA) or
``TEXCOORD_0`` (float32) plus an embedded texture image. Arrays may be nested sequences or any
array object with ``astype``/``tobytes``/``shape`` (numpy), which is packed without a Python loop.
"""

from __future__ import annotations

import json
import struct
import sys
from array import array
from typing import Any, Final

MAGIC: Final = 0x46546C67  # "glTF"
CHUNK_JSON: Final = 0x4E4F534A
CHUNK_BIN: Final = 0x004E4942
FLOAT: Final = 5126
UNSIGNED_BYTE: Final = 5121
UNSIGNED_INT: Final = 5125
ARRAY_BUFFER: Final = 34962
ELEMENT_ARRAY_BUFFER: Final = 34963
IMAGE_TYPES: Final = {"png": "image/png", "jpg": "image/jpeg", "jpeg": "image/jpeg"}


class MeshInvalid(ValueError):
    """A mesh whose arrays do not make a valid glTF primitive (the message names which)."""


def _is_array(x: Any) -> bool:
    return hasattr(x, "astype") and hasattr(x, "tobytes") and hasattr(x, "shape")


def _rows(x: Any, width: int, name: str) -> int:
    """The number of rows of ``x`` (checking every row has ``width`` values)."""
    if _is_array(x):
        shape = tuple(x.shape)
        if len(shape) != 2 or shape[1] != width:
            raise MeshInvalid(f"{name} must have shape (N, {width}), got {shape}")
        return int(shape[0])
    rows = len(x)
    for i, row in enumerate(x):
        if len(row) != width:
            raise MeshInvalid(f"{name}[{i}] has {len(row)} values, expected {width}")
    return rows


def _pack(x: Any, code: str, dtype: str) -> bytes:
    """Little-endian bytes of ``x`` flattened as ``code`` (array module) / ``dtype`` (numpy)."""
    if _is_array(x):
        return bytes(x.astype(dtype).tobytes())
    flat = array(code, (v for row in x for v in row))
    if sys.byteorder == "big":
        flat.byteswap()
    return flat.tobytes()


def _bounds(positions: Any) -> tuple[list[float], list[float]]:
    if _is_array(positions):
        return positions.min(axis=0).tolist(), positions.max(axis=0).tolist()
    cols = list(zip(*positions, strict=True)) if len(positions) else [(0.0,), (0.0,), (0.0,)]
    lo = [float(min(c)) for c in cols]
    hi = [float(max(c)) for c in cols]
    return lo, hi


def _colors_rgba8(colors: Any, rows: int) -> bytes:
    """Vertex colours (RGB or RGBA; 0-255 integers or 0-1 floats) as uint8 RGBA bytes."""
    if _is_array(colors):
        shape = tuple(colors.shape)
        if len(shape) != 2 or shape[1] not in (3, 4) or shape[0] != rows:
            raise MeshInvalid(f"colors must have shape ({rows}, 3 or 4), got {shape}")
        c = colors
        if c.dtype.kind == "f":
            c = (c.clip(0.0, 1.0) * 255.0 + 0.5).astype("uint8")
        else:
            c = c.clip(0, 255).astype("uint8")
        if shape[1] == 3:
            out = bytearray(rows * 4)
            out[0::4], out[1::4], out[2::4] = (
                c[:, 0].tobytes(),
                c[:, 1].tobytes(),
                c[:, 2].tobytes(),
            )
            out[3::4] = b"\xff" * rows
            return bytes(out)
        return bytes(c.tobytes())
    if len(colors) != rows:
        raise MeshInvalid(f"colors has {len(colors)} rows, expected one per vertex ({rows})")
    out = bytearray()
    for i, row in enumerate(colors):
        if len(row) not in (3, 4):
            raise MeshInvalid(f"colors[{i}] has {len(row)} values, expected 3 or 4")
        vals = [
            round(min(1.0, max(0.0, v)) * 255) if isinstance(v, float) else min(255, max(0, int(v)))
            for v in row
        ]
        out += bytes([*vals, 255] if len(vals) == 3 else vals)
    return bytes(out)


class _Buffer:
    """The BIN chunk being assembled, with a bufferView per piece (4-byte aligned)."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.views: list[dict[str, Any]] = []

    def add(self, payload: bytes, target: int | None = None) -> int:
        while len(self.data) % 4:
            self.data.append(0)
        view: dict[str, Any] = {
            "buffer": 0,
            "byteOffset": len(self.data),
            "byteLength": len(payload),
        }
        if target is not None:
            view["target"] = target
        self.data += payload
        self.views.append(view)
        return len(self.views) - 1


def write_glb(
    vertices: Any,
    faces: Any,
    *,
    colors: Any | None = None,
    uvs: Any | None = None,
    texture: bytes | None = None,
    texture_type: str = "png",
    generator: str = "inline-sdk",
    extras: dict[str, Any] | None = None,
) -> bytes:
    """A GLB holding one triangle mesh. ``faces`` index ``vertices`` (three per triangle)."""
    n = _rows(vertices, 3, "vertices")
    m = _rows(faces, 3, "faces")
    if n == 0 or m == 0:
        raise MeshInvalid(f"a mesh needs vertices and faces (got {n} vertices, {m} faces)")
    if (uvs is None) != (texture is None):
        raise MeshInvalid("uvs and texture go together: give both or neither")
    if colors is not None and texture is not None:
        raise MeshInvalid("give vertex colors or a texture, not both")
    buf = _Buffer()
    lo, hi = _bounds(vertices)
    accessors: list[dict[str, Any]] = [
        {"bufferView": buf.add(_pack(vertices, "f", "<f4"), ARRAY_BUFFER), "componentType": FLOAT,
         "count": n, "type": "VEC3", "min": lo, "max": hi},
    ]  # fmt: skip
    index_bytes = _pack(faces, "I", "<u4")
    top = max(array("I", index_bytes)) if not _is_array(faces) else int(faces.max())
    if top >= n or (_is_array(faces) and int(faces.min()) < 0):
        raise MeshInvalid(f"faces index vertex {top}, but there are only {n} vertices")
    accessors.append(
        {"bufferView": buf.add(index_bytes, ELEMENT_ARRAY_BUFFER), "componentType": UNSIGNED_INT,
         "count": m * 3, "type": "SCALAR"}
    )  # fmt: skip
    attributes: dict[str, int] = {"POSITION": 0}
    primitive: dict[str, Any] = {"attributes": attributes, "indices": 1, "mode": 4}
    doc: dict[str, Any] = {"asset": {"version": "2.0", "generator": generator}}
    if colors is not None:
        attributes["COLOR_0"] = len(accessors)
        accessors.append(
            {"bufferView": buf.add(_colors_rgba8(colors, n), ARRAY_BUFFER),
             "componentType": UNSIGNED_BYTE, "normalized": True, "count": n, "type": "VEC4"}
        )  # fmt: skip
    material: dict[str, Any] = {
        "pbrMetallicRoughness": {"metallicFactor": 0.0},
        "doubleSided": False,
    }
    if uvs is not None and texture is not None:
        if _rows(uvs, 2, "uvs") != n:
            raise MeshInvalid("uvs must have one row per vertex")
        if texture_type not in IMAGE_TYPES:
            raise MeshInvalid(f"texture_type must be one of {sorted(IMAGE_TYPES)}")
        attributes["TEXCOORD_0"] = len(accessors)
        accessors.append(
            {"bufferView": buf.add(_pack(uvs, "f", "<f4"), ARRAY_BUFFER), "componentType": FLOAT,
             "count": n, "type": "VEC2"}
        )  # fmt: skip
        doc["images"] = [
            {"bufferView": buf.add(bytes(texture)), "mimeType": IMAGE_TYPES[texture_type]}
        ]
        doc["samplers"] = [{"magFilter": 9729, "minFilter": 9729}]
        doc["textures"] = [{"source": 0, "sampler": 0}]
        material["pbrMetallicRoughness"]["baseColorTexture"] = {"index": 0}
    if texture is not None:  # vertex colours need no material (and readers prefer them then)
        doc["materials"] = [material]
        primitive["material"] = 0
    doc.update(
        scene=0,
        scenes=[{"nodes": [0]}],
        nodes=[{"mesh": 0}],
        meshes=[{"primitives": [primitive]}],
        accessors=accessors,
        bufferViews=buf.views,
    )
    while len(buf.data) % 4:
        buf.data.append(0)
    doc["buffers"] = [{"byteLength": len(buf.data)}]
    if extras:
        doc["extras"] = extras
    js = json.dumps(doc, separators=(",", ":")).encode()
    js += b" " * (-len(js) % 4)
    total = 12 + 8 + len(js) + 8 + len(buf.data)
    return b"".join(
        (
            struct.pack("<III", MAGIC, 2, total),
            struct.pack("<II", len(js), CHUNK_JSON),
            js,
            struct.pack("<II", len(buf.data), CHUNK_BIN),
            bytes(buf.data),
        )
    )


def read_glb_json(data: bytes | bytearray | memoryview) -> dict[str, Any]:
    """The JSON chunk of a GLB (checks the header); raises ``MeshInvalid``."""
    raw = bytes(data[:20])
    if len(raw) < 20:
        raise MeshInvalid("not a GLB: too short")
    magic, version, total = struct.unpack("<III", raw[:12])
    length, kind = struct.unpack("<II", raw[12:20])
    if magic != MAGIC or version != 2 or kind != CHUNK_JSON or total != len(data):
        raise MeshInvalid("not a binary glTF 2.0 file")
    doc: dict[str, Any] = json.loads(bytes(data[20 : 20 + length]))
    return doc
