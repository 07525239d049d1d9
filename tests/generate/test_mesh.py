"""Meshes: the SDK's GLB writer read back by trimesh and pygltflib, the Image2Mesh base, and
mesh/relief plus a test pack's Image2Mesh subclass through real workers."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import pygltflib
import pytest
import trimesh
from inline_host import Engine
from inline_sdk import Image, NodeDeclarationError, Param
from inline_sdk.mesh import Image2Mesh, Mesh, MeshInvalid, read_glb_json, write_glb
from inline_sdk.protocol import MediaValue
from PIL import Image as PILImage

from ..e2e._graphs import n, request

TETRA = [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 1.0, 0.0]]
TETRA_FACES = [[0, 1, 2], [0, 3, 1], [1, 3, 2], [2, 3, 0]]


def load(glb: bytes) -> trimesh.Trimesh:
    return trimesh.load(io.BytesIO(glb), file_type="glb", force="mesh")


def png_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    PILImage.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


# the SDK, in this process ---------------------------------------------------------------------
def test_glb_with_vertex_colours_reads_back():
    colors = [[255, 0, 0], [0, 255, 0], [0, 0, 255], [255, 255, 255]]
    glb = write_glb(TETRA, TETRA_FACES, colors=colors)
    mesh = load(glb)
    assert mesh.is_watertight and len(mesh.faces) == 4
    assert mesh.visual.kind == "vertex"
    assert sorted(map(tuple, mesh.visual.vertex_colors[:, :3].tolist())) == sorted(
        map(tuple, colors)
    )
    doc = read_glb_json(glb)
    assert doc["asset"]["version"] == "2.0" and doc["accessors"][0]["max"] == [1.0, 1.0, 1.0]


def test_glb_with_uvs_and_a_texture_reads_back():
    texture = png_bytes(np.full((8, 8, 3), (10, 200, 30), np.uint8))
    uvs = [[0, 0], [1, 0], [0, 1], [1, 1]]
    glb = Mesh(TETRA, TETRA_FACES, uvs=uvs, texture=Image(texture)).to_glb()
    gltf = pygltflib.GLTF2.load_from_bytes(glb)
    assert gltf.images[0].mimeType == "image/png"
    view = gltf.bufferViews[gltf.images[0].bufferView]
    blob = gltf.binary_blob()
    assert blob[view.byteOffset : view.byteOffset + view.byteLength] == texture
    mesh = load(glb)
    assert mesh.visual.kind == "texture" and mesh.visual.uv.shape == (4, 2)


def test_numpy_arrays_and_lists_write_the_same_glb():
    v, f = np.array(TETRA, np.float32), np.array(TETRA_FACES, np.int64)
    assert write_glb(v, f) == write_glb(TETRA, TETRA_FACES)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"faces": [[0, 1, 9]]}, "only 4 vertices"),
        ({"faces": [[0, 1]]}, "faces[0] has 2 values"),
        ({"uvs": [[0, 0]] * 4}, "uvs and texture go together"),
        ({"colors": [[1, 2, 3]]}, "one per vertex"),
    ],
)
def test_bad_meshes_are_named(kwargs: dict[str, Any], message: str):
    args = {"faces": TETRA_FACES, **kwargs}
    faces = args.pop("faces")
    with pytest.raises(MeshInvalid, match=re.escape(message)):
        write_glb(TETRA, faces, **args)


def test_the_base_declares_the_node():
    class Cube(Image2Mesh, type="acme/cube", title="Cube"):
        def make_mesh(
            self, ctx: Any, image: Image, *, size: Annotated[float, Param("Size", min=0)] = 1.0
        ) -> Mesh:
            return Mesh(TETRA, TETRA_FACES)

    d = Cube.spec.descriptor
    assert d.output_kind == "mesh" and d.category == "3D"
    assert [(p.id, p.kind, p.required) for p in d.inputs] == [("image", "image", True)]
    assert [(p.id, p.kind) for p in d.outputs] == [("mesh", "mesh")]
    assert [p.key for p in d.params] == ["size"]
    out = Cube.spec.split_outputs(Mesh(TETRA, TETRA_FACES, params={"a": 1}))
    assert (
        out["mesh"].ext == "glb" and out["mesh"].kind == "mesh" and out["mesh"].params == {"a": 1}
    )

    with pytest.raises(NodeDeclarationError, match="keyword-only"):

        class Bad(Image2Mesh, type="acme/bad"):
            def make_mesh(self, ctx: Any, image: Image, depth: float = 1.0) -> Mesh:
                return Mesh(TETRA, TETRA_FACES)

    with pytest.raises(NodeDeclarationError, match="must implement make_mesh"):

        class Empty(Image2Mesh, type="acme/empty"):
            pass


def test_the_mesh_module_is_torch_free():
    code = (
        "import sys, inline_sdk.mesh\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} - set(sys.stdlib_module_names)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = {m for m in eval(out.stdout) if not m.startswith("_")}
    assert loaded <= {"inline_sdk", "msgspec", "pluggy", "typing_extensions"}


# through real workers ---------------------------------------------------------------------------
def relief_doc(path: str, **params: Any) -> dict[str, Any]:
    return request(
        "m",
        n("i", "input/image", {"asset": {"ref": "path", "path": path}}),
        n("m", "mesh/relief", params, image=("i", "image")),
    )


async def mesh_of(engine: Engine, doc: dict[str, Any], target_port: str = "mesh") -> Any:
    engine.cache.clear()
    result = await engine.run(doc)
    value = result.outputs[target_port]
    assert isinstance(value.value, MediaValue)
    assert (value.value.kind, value.value.ext) == ("mesh", "glb")
    return value.value, engine.read_bytes(value)


@pytest.fixture(scope="module")
def picture(settings: Any) -> str:
    """40 x 30: black left half, white right half, a red square in the black."""
    arr = np.zeros((30, 40, 3), np.uint8)
    arr[:, 20:] = 255
    arr[4:12, 4:12] = (220, 20, 20)
    path = settings.input_roots[0] / "relief.png"
    path.write_bytes(png_bytes(arr))
    return str(path)


@pytest.mark.anyio
@pytest.mark.parametrize("invert", [False, True])
async def test_relief_is_watertight_and_sized_by_its_params(
    engine: Engine, picture: str, invert: bool
):
    params = {"depth_mm": 5.0, "width_mm": 80.0, "resolution": 40, "base_mm": 2.0}
    value, glb = await mesh_of(engine, relief_doc(picture, invert=invert, **params))
    mesh = load(glb)
    assert mesh.is_watertight and mesh.is_winding_consistent and mesh.is_volume
    # X: the width; Z: the image's aspect (30/40); Y: base + depth (a white pixel), from 0
    assert np.allclose(mesh.bounds, [[0, 0, 0], [80.0, 7.0, 60.0]], atol=1e-3)
    top = mesh.vertices[:, 1]
    x, z = mesh.vertices[:, 0], mesh.vertices[:, 2]
    below_red = (z > 30) & (top > 0)
    left, right = top[(x < 30) & below_red], top[(x > 50) & below_red]
    low, high = (left, right) if not invert else (right, left)
    assert np.allclose(low, 2.0, atol=0.3) and np.allclose(high, 7.0, atol=0.3)
    colors = mesh.visual.vertex_colors[:, :3]
    assert any((c[0] > 180 and c[1] < 60 and c[2] < 60) for c in colors.tolist())  # the red
    assert value.params["resolution"] == 40 and value.params["faces"] == len(mesh.faces)


@pytest.mark.anyio
async def test_relief_refuses_a_base_of_zero_and_bad_images(engine: Engine, settings: Any):
    from inline_core import GraphInvalid

    with pytest.raises(GraphInvalid) as err:
        engine.prepare(relief_doc("x.png", base_mm=0.0))
    assert "base_mm" in str(err.value.issues)
    bogus = settings.input_roots[0] / "bogus.png"
    bogus.write_bytes(b"not an image")
    from inline_core import NodeFailed

    engine.cache.clear()
    with pytest.raises(NodeFailed) as failed:
        await engine.run(relief_doc(str(bogus)))
    assert "bogus.png' is not a readable image" in str(failed.value)


@pytest.mark.anyio
async def test_a_third_party_image2mesh_runs_out_of_process(engine: Engine, picture: str):
    # the first-party mesh pack's worker, started here (this test may run alone)
    await mesh_of(engine, relief_doc(picture, resolution=4))
    doc = request(
        "m",
        n("i", "input/image", {"asset": {"ref": "path", "path": picture}}),
        n("m", "meshpack/pyramid", {"height": 2.5}, image=("i", "image")),
    )
    first, glb = await mesh_of(engine, doc)
    again, _ = await mesh_of(engine, doc)
    assert first.params == {"height": 2.5, "loads": 1}
    assert again.params["loads"] == 1  # load ran once in the worker
    assert engine.supervisor.workers()["meshpack"].pid != engine.supervisor.workers()["mesh"].pid
    gltf = pygltflib.GLTF2.load_from_bytes(glb)
    view = gltf.bufferViews[gltf.images[0].bufferView]
    blob = gltf.binary_blob()
    with open(picture, "rb") as fh:
        assert blob[view.byteOffset : view.byteOffset + view.byteLength] == fh.read()
    mesh = load(glb)
    assert mesh.is_watertight and np.isclose(mesh.bounds[1][1], 2.5)


def test_the_readmes_learned_model_example_declares_its_node():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("## Meshes") :]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    scope: dict[str, Any] = {"__name__": "readme_example"}
    exec(compile(code.group(1), "README.md", "exec"), scope)  # torch is imported in load only
    spec = scope["TripoSR"].spec
    assert spec.type == "acme/triposr" and spec.descriptor.output_kind == "mesh"
    assert [p.key for p in spec.descriptor.params] == ["resolution"]
    assert scope["TripoSR"].min_vram_gb == 6.0 and scope["inline_nodes"]() == [spec]
