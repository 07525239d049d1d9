"""``mesh/relief``: an image as a relief, the way lithophanes and bas-reliefs are made to print.

The image is sampled on a grid (``resolution`` cells across, as many down as its aspect asks);
each grid point rises ``base_mm + depth_mm * brightness`` (``invert``: dark is high, as in a
lithophane) above a flat bottom. Top, bottom and the four walls share their edges, so the solid
is watertight with outward-facing triangles. Units are millimetres in glTF's frame: the relief
lies on the ground plane (Y up), the image's columns along +X and its rows along +Z (its top
row at Z = 0). Each vertex carries the image's colour there.
"""

from __future__ import annotations

import io
from typing import Annotated, Any

from inline_sdk import Context, Image, Param
from inline_sdk.mesh import Image2Mesh, Mesh

# numpy and pillow are imported where they are used: the pack declares its node without them,
# so the host can describe it before its venv is built (and build that venv on first use).


def _grid(image: bytes, resolution: int) -> tuple[Any, Any]:
    """(brightness 0-1, RGB uint8) sampled at the (rows+1) x (cols+1) grid points."""
    import numpy as np
    from PIL import Image as PILImage
    from PIL import UnidentifiedImageError

    try:
        img = PILImage.open(io.BytesIO(image))
        img.load()
    except (UnidentifiedImageError, OSError) as exc:
        raise ValueError(f"mesh/relief: the image input is not a readable image ({exc})") from None
    if img.mode in ("RGBA", "LA", "P"):
        rgba = img.convert("RGBA")
        img = PILImage.new("RGB", rgba.size, (255, 255, 255))
        img.paste(rgba, mask=rgba.getchannel("A"))
    img = img.convert("RGB")
    w, h = img.size
    cols = resolution
    rows = max(1, round(resolution * h / w))
    sampled = img.resize((cols + 1, rows + 1), PILImage.Resampling.BILINEAR)
    rgb = np.asarray(sampled, dtype=np.uint8)
    lum = np.asarray(sampled.convert("L"), dtype=np.float32) / 255.0
    return lum, rgb


def relief_arrays(
    image: bytes,
    *,
    depth_mm: float,
    width_mm: float,
    resolution: int,
    invert: bool,
    base_mm: float,
) -> tuple[Any, Any, Any]:
    """(vertices float32 (N, 3), faces uint32 (M, 3), colours uint8 (N, 3)) of the relief."""
    import numpy as np

    lum, rgb = _grid(image, resolution)
    if invert:
        lum = 1.0 - lum
    r1, c1 = lum.shape  # grid points: rows + 1, cols + 1
    rows, cols = r1 - 1, c1 - 1
    length_mm = width_mm * rows / cols
    zs, xs = np.meshgrid(
        np.linspace(0.0, length_mm, r1, dtype=np.float64),
        np.linspace(0.0, width_mm, c1, dtype=np.float64),
        indexing="ij",
    )
    top = np.stack([xs, base_mm + depth_mm * lum, zs], axis=-1).reshape(-1, 3)
    bottom = np.stack([xs, np.zeros_like(xs), zs], axis=-1).reshape(-1, 3)
    vertices = np.concatenate([top, bottom]).astype(np.float32)
    n = r1 * c1
    idx = np.arange(n, dtype=np.int64).reshape(r1, c1)
    a, b = idx[:-1, :-1].ravel(), idx[:-1, 1:].ravel()
    c, d = idx[1:, :-1].ravel(), idx[1:, 1:].ravel()
    top_faces = np.concatenate([np.stack([a, c, b], 1), np.stack([b, c, d], 1)])
    bottom_faces = np.concatenate([np.stack([a, b, c], 1), np.stack([b, d, c], 1)]) + n
    # the boundary loop, around in one direction: walls face outwards
    loop = np.concatenate([idx[0, :-1], idx[:-1, -1], idx[-1, :0:-1], idx[:0:-1, 0]])
    u, v = loop, np.roll(loop, -1)
    walls = np.concatenate([np.stack([u, v, u + n], 1), np.stack([v, v + n, u + n], 1)])
    faces = np.concatenate([top_faces, bottom_faces, walls]).astype(np.uint32)
    colors = np.concatenate([rgb.reshape(-1, 3)] * 2)
    return vertices, faces, colors


class Relief(Image2Mesh, type="mesh/relief", title="Relief (heightfield)", icon="mountain"):
    """An image as a printable relief: brightness is height above a solid base."""

    def load(self, ctx: Context) -> None:
        """Nothing to load: the relief is geometry, not a learned model."""

    def make_mesh(
        self,
        ctx: Context,
        image: Image,
        *,
        depth_mm: Annotated[float, Param("Relief depth (mm)", min=0.0, max=200.0, step=0.1)] = 3.0,
        width_mm: Annotated[float, Param("Width (mm)", min=1.0, max=2000.0, step=1.0)] = 100.0,
        resolution: Annotated[
            int, Param("Resolution (cells across)", min=2, max=1024, step=1)
        ] = 200,
        invert: Annotated[bool, Param("Invert (dark is high, a lithophane)")] = False,
        base_mm: Annotated[float, Param("Base (mm)", min=0.1, max=200.0, step=0.1)] = 1.0,
    ) -> Mesh:
        ctx.progress(0, 2, phase="mesh", status="Sampling the image…")
        vertices, faces, colors = relief_arrays(
            image.tobytes(),
            depth_mm=depth_mm,
            width_mm=width_mm,
            resolution=resolution,
            invert=invert,
            base_mm=base_mm,
        )
        ctx.progress(1, 2, phase="mesh", status="Writing the mesh…")
        params = {
            "depth_mm": depth_mm,
            "width_mm": width_mm,
            "resolution": resolution,
            "invert": invert,
            "base_mm": base_mm,
            "vertices": len(vertices),
            "faces": len(faces),
        }
        return Mesh(vertices, faces, colors=colors, params=params)
