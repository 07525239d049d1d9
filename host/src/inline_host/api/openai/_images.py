"""``POST /openai/v1/images/generations`` and ``/images/edits``: OpenAI's images API over
Inline's runs.

``model`` is a diffusers pipeline folder of ``models/diffusers/`` (run by the image node whose
``model`` param picks from that catalog) or the type of another node that makes an image from a
``prompt`` text input: the nodes are found by what their descriptors declare. Each of the ``n``
images is a durable run of its own, submitted through the ``RunService`` like ``POST /v1/runs``
(stored before it runs, resumed after a restart, its image a take); the answer waits for all
of them. ``size`` is ``WxH``, checked against what the model makes before anything runs
(``_sizes``: a pipeline folder's multiple, read from its configs; a node's width and height
params' range and step), ``auto`` or none: the model's own; ``seed`` (an extra) seeds image
``i`` with ``seed + i``. ``response_format`` ``url`` points at ``/v1/takes/{id}/bytes``,
``b64_json`` carries the PNG. ``/images/edits`` takes the multipart upload the official client
sends (``image``, or one ``image[]``; the same fields as a form): the image is stored as an
input asset and feeds the node's ``image`` input (img2img); ``strength`` (an extra) is the
denoise strength. A ``mask`` (inpainting) is refused by name, as is a model with no
image-to-image. Errors use OpenAI's shape,
``{"error": {"message", "type", "param", "code"}}``: a run that failed for the client's mistake
(missing weights, a missing secret) is a 4xx (``_failures``), and a retry of the request, or a
repeat of its ``Idempotency-Key``, gets the runs of the first try (``_attempts``). Runs whose
client went before they ended are cancelled once no retry listens to them (``_listeners``).
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import anyio
import msgspec
from inline_core import DocumentInvalid
from inline_sdk import Descriptor
from litestar import Controller, MediaType, Request, Response, post
from litestar.datastructures import UploadFile
from litestar.di import NamedDependency, Provide

from ...assets import AssetRefused, sniff_kind
from ...models import ModelCatalogs
from ...runs import Conflict, RunService, RunState, Take
from .._models import ModelsService
from ._attempts import Attempt, Attempts, provide_attempts, submit_once
from ._completions import await_runs
from ._failures import NO_RETRY, failure_type, run_failed
from ._listeners import Listeners, provide_listeners
from ._schemas import OpenAIError, openai_error
from ._sizes import check_size

__all__ = ("OpenAIImagesController", "OpenAIError")

#: The catalog of pipeline folders (``models/diffusers/<name>/``).
FOLDERS: Final = "diffusers"
SIZE: Final = re.compile(r"^(\d{2,5})x(\d{2,5})$")
MAX_IMAGES: Final = 10
#: The node's input an edit's image feeds.
IMAGE_INPUT: Final = "image"
#: Remote exception types of a node whose model has no image-to-image pipeline.
NO_IMG2IMG: Final = frozenset({"NoImageToImage"})
#: Multipart fields of an edit that this server cannot honour, and why.
EDIT_REFUSED: Final = {
    "mask": "inpainting with a mask is not supported: send the image alone (img2img)",
    "stream": "streamed partial images are not supported",
}


class ImagesRequest(msgspec.Struct, kw_only=True):
    """The request body (other OpenAI fields, such as ``quality``, are accepted and unused)."""

    prompt: str
    model: str | None = None
    n: int = 1
    size: str | None = None
    response_format: str | None = "url"
    seed: int | None = None
    #: the denoise strength of an edit (img2img)
    strength: float | None = None


def _invalid(exc: msgspec.ValidationError) -> OpenAIError:
    message = str(exc)
    param = message.rpartition("$.")[2].rstrip("`") if "$." in message else None
    return OpenAIError(400, f"Invalid request: {message}", param=param)


def parse(raw: bytes) -> ImagesRequest:
    """The body, checked; raises ``OpenAIError`` naming the field."""
    try:
        req = msgspec.json.decode(raw, type=ImagesRequest)
    except msgspec.ValidationError as exc:
        raise _invalid(exc) from None
    except msgspec.DecodeError as exc:
        raise OpenAIError(400, f"The body is not JSON: {exc}") from None
    if req.strength is not None:
        raise OpenAIError(400, "'strength' is for /images/edits only.", param="strength")
    return checked(req)


def checked(req: ImagesRequest) -> ImagesRequest:
    """``req`` with its fields checked; raises ``OpenAIError`` naming the field."""
    if req.response_format is None:
        req = msgspec.structs.replace(req, response_format="url")
    if not req.prompt.strip():
        raise OpenAIError(400, "'prompt' must not be empty.", param="prompt")
    if not 1 <= req.n <= MAX_IMAGES:
        raise OpenAIError(400, f"'n' must be from 1 to {MAX_IMAGES}, got {req.n}.", param="n")
    if req.response_format not in ("url", "b64_json"):
        raise OpenAIError(
            400,
            f"'response_format' must be 'url' or 'b64_json', got {req.response_format!r}.",
            param="response_format",
        )
    if req.size not in (None, "auto") and not SIZE.match(req.size):
        raise OpenAIError(
            400, f"'size' must be WxH (e.g. 1024x1024), got {req.size!r}.", param="size"
        )
    if req.seed is not None and not 0 <= req.seed < 2**32:
        raise OpenAIError(400, "'seed' must be from 0 to 2**32 - 1.", param="seed")
    if req.strength is not None and not 0 < req.strength <= 1:
        raise OpenAIError(400, "'strength' must be above 0 and at most 1.", param="strength")
    return req


async def parse_edit(request: Request[Any, Any, Any]) -> tuple[ImagesRequest, bytes]:
    """An edit's multipart body: its fields, checked, and the image's bytes."""
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise OpenAIError(400, "An edit is a multipart/form-data upload (the image as 'image').",
                          param="image")  # fmt: skip
    form = await request.form()
    fields: dict[str, Any] = {}
    images: list[UploadFile] = []
    for key, value in form.multi_items():
        if key in EDIT_REFUSED and not (key == "stream" and value in ("false", "False")):
            raise OpenAIError(400, f"'{key}': {EDIT_REFUSED[key]}.", param=key)
        if key in ("image", "image[]"):
            if not isinstance(value, UploadFile):
                raise OpenAIError(400, "'image' must be a file part.", param="image")
            images.append(value)
        elif not isinstance(value, UploadFile) and key != "stream":
            fields[key] = value
    if len(images) != 1:
        raise OpenAIError(400, f"An edit takes exactly one image (got {len(images)}).",
                          param="image")  # fmt: skip
    data = await images[0].read()
    try:
        kind, _ = sniff_kind(data, what="'image'", hint="")
    except AssetRefused as exc:
        raise OpenAIError(400, str(exc).strip(), param="image") from None
    if kind != "image":
        raise OpenAIError(400, f"'image' must be an image (got {kind}).", param="image")
    try:
        req = msgspec.convert(fields, ImagesRequest, strict=False)
    except msgspec.ValidationError as exc:
        raise _invalid(exc) from None
    return checked(req), data


@dataclass(frozen=True, slots=True)
class ImageNodes:
    """The nodes that make an image from a ``prompt`` text input: ``folders`` runs the pipeline
    folders (its ``model`` param picks from that catalog), ``nodes`` are the others, named by
    their type."""

    folders: Descriptor | None
    nodes: tuple[Descriptor, ...]

    def descriptor(self, node_type: str) -> Descriptor | None:
        every = (*((self.folders,) if self.folders is not None else ()), *self.nodes)
        return next((d for d in every if d.type == node_type), None)


def image_nodes(declared: Sequence[Descriptor]) -> ImageNodes:
    """The image nodes among ``declared`` (see ``ImageNodes``)."""
    folders: Descriptor | None = None
    nodes: list[Descriptor] = []
    for d in declared:
        prompt = d.input("prompt")
        if d.output_kind != "image" or prompt is None or prompt.kind != "text":
            continue
        model = d.param("model")
        if model is not None and model.options_from == FOLDERS:
            folders = folders or d
        else:
            nodes.append(d)
    return ImageNodes(folders, tuple(nodes))


def resolve_model(
    images: ImageNodes, catalogs: ModelCatalogs, model: str | None
) -> tuple[str, dict[str, Any]]:
    """(node type, its fixed params) for ``model``; raises ``OpenAIError`` listing the models."""
    folders = catalogs.entries(FOLDERS) if images.folders is not None else ()
    nodes = [d.type for d in images.nodes]
    picked = model if model is not None else next(iter(folders), None)
    if images.folders is not None and picked is not None and picked in folders:
        return images.folders.type, {"model": picked}
    if model is None and nodes:
        return nodes[0], {}
    if model is not None and model in nodes:
        return model, {}
    known = ", ".join([*folders, *nodes]) or "none (put a pipeline in models/diffusers/)"
    raise OpenAIError(
        404,
        f"The model {model!r} does not exist: use a diffusers folder of models/diffusers/ or an "
        f"image node type (available: {known}).",
        param="model",
        code="model_not_found",
    )


def graphs(
    images: ImageNodes, catalogs: ModelCatalogs, req: ImagesRequest, init: str | None = None
) -> tuple[str, list[dict[str, Any]]]:
    """What ``req.model`` names (a pipeline folder or a node type), and one run request per
    image (``init``: the input asset an edit starts from)."""
    node_type, fixed = resolve_model(images, catalogs, req.model)
    named = str(fixed.get("model", node_type))
    descriptor = images.descriptor(node_type)
    keys = {p.key for p in descriptor.params} if descriptor is not None else set()
    params = dict(fixed)
    if req.size not in (None, "auto"):
        m = SIZE.match(req.size)
        assert m is not None
        if not {"width", "height"} <= keys or descriptor is None:
            raise OpenAIError(400, f"{node_type} takes no size.", param="size")
        width, height = int(m.group(1)), int(m.group(2))
        folder = catalogs.find(FOLDERS, named) if "model" in fixed else None
        check_size(descriptor, folder, named, width, height)
        params.update(width=width, height=height)
    inputs: dict[str, Any] = {"prompt": {"from": "prompt", "output": "text"}}
    nodes: list[dict[str, Any]] = [
        {"id": "prompt", "type": "input/text", "params": {"text": req.prompt}}
    ]
    if init is not None:
        port = descriptor.input(IMAGE_INPUT) if descriptor is not None else None
        if port is None or port.kind != "image":
            raise OpenAIError(400, f"The model {named!r} takes no image to edit (its node "
                              f"{node_type} has no image input).", param="model")  # fmt: skip
        if req.strength is not None:
            if "strength" not in keys:
                raise OpenAIError(400, f"{node_type} takes no strength.", param="strength")
            params["strength"] = req.strength
        nodes.append({"id": "init", "type": "input/image",
                      "params": {"asset": {"ref": "asset", "id": init}}})  # fmt: skip
        inputs[IMAGE_INPUT] = {"from": "init", "output": "image"}
    out = []
    for i in range(req.n):
        p = dict(params)
        if req.seed is not None and "seed" in keys:
            p["seed"] = (req.seed + i) % 2**32
        graph = [*nodes, {"id": "image", "type": node_type, "params": p, "inputs": inputs}]
        out.append({"graph": {"schemaVersion": 1, "nodes": graph}, "target": "image"})
    return named, out


def _take(service: RunService, state: RunState, model: str) -> Take:
    if state.status == "error":
        if failure_type(service, state) in NO_IMG2IMG:
            message = state.error.message if state.error is not None else "no image-to-image"
            raise OpenAIError(400, f"The model {model!r} cannot edit an image: {message}",
                              param="model", code="invalid_input", headers=NO_RETRY)  # fmt: skip
        raise run_failed(service, state, model)
    if state.status != "done":
        raise OpenAIError(409, f"Run {state.run_id} {state.status}.", type="server_error",
                          code="run_failed", headers=NO_RETRY)  # fmt: skip
    takes = [t for t in state.takes if t.node_id == "image" and t.kind == "image"]
    if not takes:
        raise OpenAIError(500, f"Run {state.run_id} made no image.", type="server_error")
    return takes[-1]


class OpenAIImagesController(Controller):
    path = "/openai/v1/images"
    exception_handlers = {OpenAIError: openai_error}  # noqa: RUF012 (Litestar's class attribute)
    dependencies = {  # noqa: RUF012 (Litestar's class attribute)
        "attempts": Provide(provide_attempts, sync_to_thread=False),
        "listeners": Provide(provide_listeners, sync_to_thread=False),
    }

    @post("/generations", status_code=200, summary="OpenAI images: each image a durable run")
    async def generations(
        self,
        service: NamedDependency[RunService],
        models: NamedDependency[ModelsService],
        attempts: NamedDependency[Attempts],
        listeners: NamedDependency[Listeners],
        request: Request[Any, Any, Any],
    ) -> Response[Any]:
        raw = await request.body()
        req = parse(raw)
        images = image_nodes(await models.declared())  # the packs installed from the CLI too
        named, docs = graphs(images, models.catalogs, req)
        attempt = Attempt.of("images/generations", request, raw)
        return await _answer(service, attempts, listeners, request, attempt, req, named, docs)

    @post("/edits", status_code=200, summary="OpenAI image edits: img2img, each a durable run")
    async def edits(
        self,
        service: NamedDependency[RunService],
        models: NamedDependency[ModelsService],
        attempts: NamedDependency[Attempts],
        listeners: NamedDependency[Listeners],
        request: Request[Any, Any, Any],
    ) -> Response[Any]:
        req, data = await parse_edit(request)
        images = image_nodes(await models.declared())
        graphs(images, models.catalogs, req, "")  # every check before the image is stored
        init = await anyio.to_thread.run_sync(service.put_asset, data)
        named, docs = graphs(images, models.catalogs, req, init)
        # a retry sends the same fields and image: known by both
        raw = msgspec.json.encode([msgspec.to_builtins(req), init])
        attempt = Attempt.of("images/edits", request, raw)
        return await _answer(service, attempts, listeners, request, attempt, req, named, docs)


async def _answer(
    service: RunService,
    attempts: Attempts,
    listeners: Listeners,
    request: Request[Any, Any, Any],
    attempt: Attempt,
    req: ImagesRequest,
    named: str,
    docs: list[dict[str, Any]],
) -> Response[Any]:
    """Submit one run per image, wait for them all, and answer their images."""
    try:
        run_ids = await submit_once(service, attempts, attempt, docs)
    except DocumentInvalid as exc:
        raise OpenAIError(400, f"Invalid request: {exc}", code="invalid_graph") from None
    except Conflict as exc:
        raise OpenAIError(400, str(exc), code="idempotency_key_reused") from None
    await await_runs(request, service, listeners, run_ids)
    takes = []
    for run_id in run_ids:
        state = service.state(run_id)  # ended by now
        assert state is not None  # submitted just now: stored before it ran
        takes.append(_take(service, state, named))
    base = str(request.base_url).rstrip("/")
    data = []
    for take in takes:
        if req.response_format == "url":
            data.append({"url": f"{base}/v1/takes/{take.id}/bytes", "revised_prompt": None})
        else:
            png = await anyio.to_thread.run_sync(service.take_data, take.id)
            data.append({"b64_json": base64.b64encode(png).decode(), "revised_prompt": None})
    body = {"created": int(time.time()), "data": data}
    return Response(content=body, status_code=200, media_type=MediaType.JSON)
