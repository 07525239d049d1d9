"""``Mesh``: the value a node returns on a ``mesh`` output (written as a GLB take)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ._glb import write_glb
from ._media import Image, MeshFile


@dataclass(frozen=True, slots=True, eq=False)
class Mesh:
    """A triangle mesh: ``vertices`` (N x 3 floats), ``faces`` (M x 3 vertex indices), and
    optionally per-vertex ``colors`` (RGB/RGBA, 0-255 integers or 0-1 floats) or ``uvs``
    (N x 2) plus a ``texture`` image. Arrays are nested sequences or numpy arrays.

    ``params`` are the take params recorded with it, as on ``Media``.
    """

    vertices: Any
    faces: Any
    colors: Any | None = None
    uvs: Any | None = None
    texture: Image | bytes | None = None
    params: dict[str, Any] | None = None
    kind: ClassVar[str] = "mesh"

    def to_glb(self) -> bytes:
        """The mesh as binary glTF 2.0 bytes (raises ``MeshInvalid``)."""
        texture, texture_type = self.texture, "png"
        if isinstance(texture, Image):
            texture, texture_type = texture.tobytes(), texture.ext
        return write_glb(
            self.vertices,
            self.faces,
            colors=self.colors,
            uvs=self.uvs,
            texture=texture,
            texture_type=texture_type,
        )

    def to_media(self) -> MeshFile:
        """The mesh as the GLB media value that crosses to the host."""
        return MeshFile(self.to_glb(), params=self.params)
