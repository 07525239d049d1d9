"""A third-party Image2Mesh subclass with no numpy and no torch: a textured tetrahedron whose
height is a param, loaded once per worker (``loads`` counts it), textured with the input image."""

from __future__ import annotations

from typing import Annotated

from inline_sdk import Context, Image, NodeSpec, Param, hookimpl
from inline_sdk.mesh import Image2Mesh, Mesh

__all__ = ("Pyramid", "inline_nodes")


class Pyramid(Image2Mesh, type="meshpack/pyramid", title="Pyramid"):
    """A tetrahedron, textured with the image."""

    loads = 0

    def load(self, ctx: Context) -> None:
        type(self).loads += 1
        self.base = [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]

    def make_mesh(
        self,
        ctx: Context,
        image: Image,
        *,
        height: Annotated[float, Param("Height", min=0.1, max=10.0)] = 1.0,
    ) -> Mesh:
        vertices = [*self.base, [0.25, height, 0.25]]
        faces = [[0, 1, 2], [0, 3, 1], [1, 3, 2], [2, 3, 0]]
        uvs = [[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.5, 0.5]]
        return Mesh(
            vertices, faces, uvs=uvs, texture=image, params={"height": height, "loads": self.loads}
        )


@hookimpl
def inline_nodes() -> list[NodeSpec]:
    return [Pyramid.spec]
