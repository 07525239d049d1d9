"""Meshes: the ``Mesh`` value, the GLB writer, and the ``Image2Mesh`` node base (torch-free)."""

from ._glb import MeshInvalid, read_glb_json, write_glb
from ._image2mesh import Image2Mesh
from ._media import MeshFile
from ._mesh import Mesh

__all__ = ("Image2Mesh", "Mesh", "MeshFile", "MeshInvalid", "read_glb_json", "write_glb")
