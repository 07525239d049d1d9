"""``Image2Mesh``: the base class of image-to-mesh nodes (torch-free; a model imports its own).

A subclass names its node in the class statement and implements ``load`` and ``make_mesh``;
``make_mesh``'s keyword-only arguments are the node's params, declared as on any node::

    class Relief(Image2Mesh, type="mesh/relief", title="Relief"):
        def load(self, ctx): ...
        def make_mesh(self, ctx, image, *, depth_mm: Annotated[float, Param("Depth")] = 3.0):
            return Mesh(vertices, faces)

The base declares the rest: the input ``image``, the output ``mesh`` (output kind ``mesh``, a
GLB take). ``load`` runs once per worker, on the first call, after the host's memory broker
placed the model (``self.device``; without a broker, ``local_placement``'s device); then
``compile(device)`` (a no-op unless overridden; a
failure is logged once and the model runs eager).
"""

from __future__ import annotations

import inspect
import threading
from typing import Annotated, Any, ClassVar

from ._bases import POSITIONAL, NodeBase, declare_run, keyword_params
from ._context import Context
from ._media import Image
from ._mesh import Mesh
from ._node import Output, Port
from ._placement import local_placement
from ._protocol import ModelSize

GIB = 1 << 30
IMAGE_PORT = Annotated[Image, Port("Image")]
MESH_OUTPUT = Annotated[Mesh, Output("mesh", "Mesh")]


class Image2Mesh(NodeBase):
    """Base of image-to-mesh nodes (see the module docstring).

    ``min_vram_gb`` is what the model needs on an accelerator; with 0 (the default) it runs on
    the CPU and asks the broker nothing. ``spec`` is the declared node (return it from
    ``inline_nodes``).
    """

    min_vram_gb: ClassVar[float] = 0.0
    #: Where ``load`` should put the model (the broker's answer).
    device: str = "cpu"

    _output_kind = "mesh"
    _category = "3D"
    _icon = "cube"

    @classmethod
    def _declare(cls, node_type: str) -> Any:
        return _make_run(cls, node_type)

    def __init__(self) -> None:
        self._load_lock = threading.Lock()
        self._loaded = False

    # what a subclass implements -------------------------------------------------------------
    def load(self, ctx: Context) -> None:
        """Load the model onto ``self.device`` (once per worker)."""

    def make_mesh(self, ctx: Context, image: Image, **params: Any) -> Mesh:
        """The mesh of ``image``."""
        raise NotImplementedError(f"{type(self).__name__} must implement make_mesh")

    def compile(self, device: str) -> None:
        """Compile the loaded model for ``device`` (optional; the default does nothing)."""

    def warm(self, ctx: Context) -> None:
        """Place, load and compile before the first call (a deployment's warm-up)."""
        self.ensure_loaded(ctx)

    def unload(self) -> None:
        """Free the loaded model (the broker asked to make room); the next call loads again."""

    # the base's part --------------------------------------------------------------------------
    def place(self, ctx: Context) -> str:
        """The device the broker gives this model (the CPU when it needs no accelerator)."""
        if self.min_vram_gb <= 0:
            return "cpu"
        size = ModelSize(
            name=self.spec.type,
            role="other",
            params=0,
            bytes=int(self.min_vram_gb * GIB),
            slot=f"image2mesh:{self.spec.type}",
        )
        placed = ctx.memory.place([size])
        if placed is None:  # no broker: the one local rule every pack falls back to
            return local_placement(size.bytes).device
        if not placed.fits or not placed.components:
            raise RuntimeError(f"{self.spec.type} does not fit here: {placed.reason}")
        plan = placed.components[0]
        ctx.memory.hold(size.slot, size.name, plan.bytes or size.bytes, plan, self._forget)
        return plan.device

    def ensure_loaded(self, ctx: Context) -> None:
        """Place, load and compile once (later calls return at once)."""
        if self._loaded:
            return
        with self._load_lock:
            if self._loaded:
                return
            self.device = self.place(ctx)
            ctx.phase("loading", "Loading model…", 0.0)
            self.load(ctx)
            try:
                self.compile(self.device)
            except Exception as exc:  # compiling is an optimisation: run eager instead
                ctx.log.warning("%s: compiling failed, running eager: %s", self.spec.type, exc)
            self._loaded = True

    def _forget(self) -> None:
        with self._load_lock:
            self._loaded = False
            self.unload()


def _make_run(cls: type[Image2Mesh], node_type: str) -> Any:
    """A ``run(self, ctx, image, *, <make_mesh's params>)`` for ``build_spec`` to declare."""
    params = keyword_params(cls, Image2Mesh, "make_mesh", node_type, "self, ctx, image")

    def run(self: Image2Mesh, ctx: Context, image: Image, **values: Any) -> Mesh:
        self.ensure_loaded(ctx)
        mesh = self.make_mesh(ctx, image, **values)
        if not isinstance(mesh, Mesh):
            raise TypeError(f"{node_type}: make_mesh returned {type(mesh).__name__}, not a Mesh")
        return mesh

    head = [inspect.Parameter("image", POSITIONAL, annotation=IMAGE_PORT)]
    return declare_run(cls, run, head, params, MESH_OUTPUT)
