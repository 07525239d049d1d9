"""The /v1 resources: one controller each; services come in by dependency injection."""

from __future__ import annotations

import email.utils
import mimetypes
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

import anyio
import msgspec
from inline_core import HeaderError
from inline_sdk import Descriptor
from litestar import (
    Controller,
    MediaType,
    Request,
    Response,
    WebSocket,
    delete,
    get,
    post,
    websocket,
)
from litestar.datastructures import UploadFile
from litestar.di import NamedDependency
from litestar.exceptions import NotAuthorizedException
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import FromPath, JSONBody, QueryParameter
from litestar.response import Redirect, Stream

from ..assets import RAW_HINT, AssetRefused, sniff_kind
from ..guard import bearer_matches
from ..runs import (
    RunService,
    RunState,
    RunSummary,
    SnapshotEvent,
    Submitted,
    Take,
    encode_event,
    take_view,
)
from ._errors import ApiError, not_found
from ._models import ModelsService, UnknownModel, UnsafeName
from ._openapi import (
    ModelListDoc,
    RawUploadOperation,
    RunRequestOperation,
    errors,
    submit_responses,
)
from ._refs import ref_roots, resolve_path_refs
from ._system import Health, SystemService

TAKE_ID = re.compile(r"^take_[0-9a-f]{12}$")
CONTENT_TYPES = {
    "png": "image/png",
    "jpg": "image/jpeg",
    "webp": "image/webp",
    "mp4": "video/mp4",
    "webm": "video/webm",
    "wav": "audio/wav",
    "mp3": "audio/mpeg",
    "txt": "text/plain",  # Litestar adds "; charset=utf-8" to text types
    "glb": "model/gltf-binary",
}


class ModelList(msgspec.Struct, frozen=True, rename="camel"):
    registry_version: str
    models: list[Any]


class RunList(msgspec.Struct, frozen=True):
    runs: list[RunSummary]


class TakeList(msgspec.Struct, frozen=True):
    takes: list[Take]


class AssetStored(msgspec.Struct, frozen=True):
    id: str
    kind: str
    bytes: int


class Welcome(msgspec.Struct, frozen=True, rename="camel"):
    """``GET /`` without a front end: where things are."""

    name: str
    api_version: str
    docs: str
    openapi: str
    health: str
    events: str


WELCOME = Welcome(
    name="Inline",
    api_version="v1",
    docs="/schema",
    openapi="/schema/openapi.json",
    health="/v1/health",
    events="/v1/runs/{runId}/events (websocket; every event type is in the OpenAPI description)",
)


@get("/", summary="Where things are (a browser is sent to the docs at /schema)", status_code=200)
async def index(request: Request[Any, Any, Any]) -> Response[Any]:
    """``GET /`` when no front end is served: a browser goes to the docs, a script gets JSON
    naming them."""
    if "text/html" in request.headers.get("accept", ""):
        return Redirect("/schema", status_code=302)
    return Response(content=msgspec.json.encode(WELCOME), media_type=MediaType.JSON)


class HealthController(Controller):
    path = "/v1/health"

    @get(summary="Engine health, registry version and device budget")
    async def health(self, system: NamedDependency[SystemService]) -> Health:
        return await system.health()


class ModelsController(Controller):
    path = "/v1/models"

    @get(
        summary="Every node descriptor (ETag: the registry version)",
        responses={
            200: ResponseSpec(ModelListDoc, description="The descriptors", generate_examples=False),
            304: ResponseSpec(None, description="Not modified (If-None-Match: the ETag)"),
            **errors(404),
        },
    )
    async def list_models(
        self, models: NamedDependency[ModelsService], request: Request[Any, Any, Any]
    ) -> Response[Any]:
        raw = request.scope.get("raw_path") or request.scope["path"].encode()
        if raw.split(b"?")[0].endswith(b"/"):
            raise not_found("Unknown node type ''.")  # GET /v1/models/ (contract 3.2)
        await models.refresh()
        version = models.registry_version()
        etag = f'"{version}"'
        match = request.headers.get("if-none-match")
        if match is not None and etag in {t.strip().removeprefix("W/") for t in match.split(",")}:
            return Response(content=b"", status_code=304)
        body = ModelList(registry_version=version, models=models.descriptors())
        return Response(
            content=msgspec.json.encode(body), media_type=MediaType.JSON, headers={"ETag": etag}
        )

    @get(
        "/{node_type:path}",
        summary="One node descriptor (the type contains slashes)",
        responses={
            200: ResponseSpec(Descriptor, description="The descriptor", generate_examples=False),
            **errors(404),
        },
    )
    async def get_model(
        self, models: NamedDependency[ModelsService], node_type: FromPath[str]
    ) -> Response[Any]:
        await models.refresh()
        node_type = node_type.lstrip("/")
        descriptor = models.descriptor(node_type) if node_type else None
        if descriptor is None:
            raise not_found(f"Unknown node type '{node_type}'.")
        return Response(content=msgspec.json.encode(descriptor), media_type=MediaType.JSON)


#: Every status a run can have, as ``GET /v1/runs?status=`` names them.
RUN_STATUSES = ("queued", "running", "done", "error", "cancelled")


class RunsController(Controller):
    path = "/v1/runs"

    @post(
        summary="Submit a run: 201 new, 200 replay of a clientRunId, 409 conflict, 422",
        status_code=201,
        operation_class=RunRequestOperation,
        responses=submit_responses(),
    )
    async def submit(
        self,
        service: NamedDependency[RunService],
        data: JSONBody[dict[str, Any]],
        request: Request[Any, Any, Any],
    ) -> Response[Submitted]:
        await service.refresh()
        named = service.chosen_secrets(data)
        token = request.app.state.operator_token
        if named and not bearer_matches(request.headers.get("authorization"), token):
            raise NotAuthorizedException(
                f"{', '.join(named)} names a secret other than the node's own: choosing which "
                "stored secret a node gets needs the operator token (send 'Authorization: "
                "Bearer <token>', with INLINE_TOKEN or the token in <data dir>/operator-token)."
            )
        # a relative {"ref": "path"} means the first input root's file (a 422 says where it
        # looked when none holds it)
        settings = service.engine.settings
        data = resolve_path_refs(data, ref_roots(settings.input_roots, settings.cwd))
        run_id, status, created = await service.submit(data)
        return Response(Submitted(run_id, status), status_code=201 if created else 200)

    @get(
        summary="Unfinished runs in submission order; with status= or limit=, finished runs "
        "too, newest first",
        responses=errors(400),
    )
    async def list_runs(
        self,
        service: NamedDependency[RunService],
        request: Request[Any, Any, Any],
        status: Annotated[
            str | None,
            QueryParameter(
                description="comma-separated: " + ", ".join(RUN_STATUSES) + " (default: all)"
            ),
        ] = None,
        limit: Annotated[int | None, QueryParameter(ge=1, le=1000)] = None,
    ) -> RunList:
        unknown = sorted(set(request.query_params) - {"status", "limit"})
        if unknown:
            raise ApiError(
                400,
                "bad_request",
                f"Unknown filter '{unknown[0]}' for GET /v1/runs: the filters are status= "
                f"({', '.join(RUN_STATUSES)}) and limit= (1-1000).",
            )
        if status is None and limit is None:
            return RunList(runs=service.live())  # the contract's live queue
        wanted = tuple(s.strip() for s in (status or ",".join(RUN_STATUSES)).split(","))
        bad = [s for s in wanted if s not in RUN_STATUSES]
        if bad:
            raise ApiError(
                400,
                "bad_request",
                f"Unknown status '{bad[0]}' in status=: use {', '.join(RUN_STATUSES)} "
                "(comma-separated).",
            )
        return RunList(runs=service.listed(wanted, limit or 50))

    @get("/{run_id:str}", summary="A run's full state", responses=errors(404))
    async def get_run(
        self, service: NamedDependency[RunService], run_id: FromPath[str]
    ) -> RunState:
        state = service.state(run_id)
        if state is None:
            raise not_found(f"No run '{run_id}'.")
        return state

    @delete(
        "/{run_id:str}",
        status_code=200,
        summary="Cancel a run (a finished run answers its own status)",
        responses=errors(404),
    )
    async def cancel_run(
        self, service: NamedDependency[RunService], run_id: FromPath[str]
    ) -> Submitted:
        status = await service.cancel(run_id)
        if status is None:
            raise not_found(f"No run '{run_id}'.")
        return Submitted(run_id, status)


@websocket("/v1/runs/{run_id:str}/events")
async def run_events(
    socket: WebSocket[Any, Any, Any], run_id: FromPath[str], service: NamedDependency[RunService]
) -> None:
    """``WS /v1/runs/{runId}/events``: a snapshot, then events until the terminal one."""
    found = service.subscribe(run_id)
    if found is None:
        # Accepted first: a close before the accept reaches the client as an HTTP 403.
        await socket.accept()
        await socket.close(code=4404, reason=f"No run '{run_id}'.")
        return
    sub, snapshot = found
    await socket.accept()
    try:
        first = encode_event(SnapshotEvent(run_id=run_id, state=snapshot))
        await socket.send_data(first.decode(), mode="text")
        while sub is not None:
            for event in await sub.next_batch():
                await socket.send_data(event.data.decode(), mode="text")
                if event.terminal:
                    sub = None
                    break
        await socket.close(code=1000)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass
    except Exception as exc:  # a client that went away mid-send
        if "disconnect" not in type(exc).__name__.lower():
            raise
    finally:
        if sub is not None:
            service.unsubscribe(run_id, sub)


class TakesController(Controller):
    path = "/v1/takes"

    @get(
        summary="Take history, newest first (filter by nodeId and/or runId)",
        responses=errors(400),
    )
    async def history(
        self,
        service: NamedDependency[RunService],
        node_id: Annotated[str | None, QueryParameter(name="nodeId")] = None,
        run_id: Annotated[str | None, QueryParameter(name="runId")] = None,
        limit: Annotated[int, QueryParameter(ge=1, le=1000)] = 100,
    ) -> TakeList:
        return TakeList(takes=service.history(node_id=node_id, run_id=run_id, limit=limit))

    @get("/{take_id:str}", summary="A take", responses=errors(404))
    async def get_take(self, service: NamedDependency[RunService], take_id: FromPath[str]) -> Take:
        record = service.take(take_id) if TAKE_ID.match(take_id) else None
        if record is None:
            raise not_found(f"No take '{take_id}'.")
        return take_view(record)

    @get(
        "/{take_id:str}/bytes",
        summary="A take's bytes (Range supported)",
        responses={
            200: ResponseSpec(
                bytes, description="The bytes", media_type="application/octet-stream"
            ),
            206: ResponseSpec(
                bytes, description="The range asked for", media_type="application/octet-stream"
            ),
            **errors(404, 416),
        },
    )
    async def get_bytes(
        self,
        service: NamedDependency[RunService],
        take_id: FromPath[str],
        request: Request[Any, Any, Any],
    ) -> Response[Any]:
        record = service.take(take_id) if TAKE_ID.match(take_id) else None
        if record is None:
            raise not_found(f"No take '{take_id}'.")
        content_type = CONTENT_TYPES.get(record.ext) or _guess(record.ext)
        if record.kind == "text":  # kept in the run store
            data = service.take_text(record)
            if data is None:
                raise not_found("Take bytes are not available.")
            return ranged_bytes(
                data, content_type, record.hash, record.created_at / 1000,
                request.headers.get("range"),
            )  # fmt: skip
        path = service.take_file(record)
        if path is None:
            raise not_found("Take bytes are not available.")
        return ranged_file(path, content_type, record.hash, request.headers.get("range"))


def _guess(ext: str) -> str:
    return mimetypes.guess_type(f"x.{ext}")[0] or "application/octet-stream"


RANGE = re.compile(r"^bytes=(\d{0,19})-(\d{0,19})$")  # more digits: 416, not int() overflow


def ranged_file(
    path: Path, content_type: str, etag: str, range_header: str | None
) -> Response[Any]:
    """The file, or the part a single ``Range: bytes=a-b`` asks for (206), with validators."""
    st = path.stat()
    answer = _range(st.st_size, etag, st.st_mtime, range_header)
    if isinstance(answer, Response):
        return answer
    start, end, status, headers = answer
    headers["Content-Length"] = str(end - start + 1)  # a stream says its length

    async def chunks() -> AsyncIterator[bytes]:
        async with await anyio.open_file(path, "rb") as fh:
            await fh.seek(start)
            left = end - start + 1
            while left > 0:
                chunk = await fh.read(min(left, 1 << 20))
                if not chunk:
                    break
                left -= len(chunk)
                yield chunk

    return Stream(chunks(), status_code=status, media_type=content_type, headers=headers)


def ranged_bytes(
    data: bytes, content_type: str, etag: str, modified: float, range_header: str | None
) -> Response[Any]:
    """``data``, or the part a single ``Range: bytes=a-b`` asks for (206), with validators."""
    answer = _range(len(data), etag, modified, range_header)
    if isinstance(answer, Response):
        return answer
    start, end, status, headers = answer
    return Response(
        data[start : end + 1], status_code=status, media_type=content_type, headers=headers
    )


def _range(
    size: int, etag: str, modified: float, range_header: str | None
) -> tuple[int, int, int, dict[str, str]] | Response[Any]:
    """(start, end, status, headers) of the bytes a request asks for out of ``size``, or its
    416 answer."""
    headers = {
        "Accept-Ranges": "bytes",
        "ETag": f'"{etag}"',
        "Last-Modified": email.utils.formatdate(modified, usegmt=True),
        "Cache-Control": "public, max-age=31536000, immutable",
    }
    start, end, status = 0, size - 1, 200
    if range_header:
        m = RANGE.match(range_header.strip())
        if m is None or (not m.group(1) and not m.group(2)):
            return Response(b"", status_code=416, headers={"Content-Range": f"bytes */{size}"})
        if m.group(1):
            start = int(m.group(1))
            end = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
        else:
            start = max(0, size - int(m.group(2)))
        if start > end or start >= size:
            return Response(b"", status_code=416, headers={"Content-Range": f"bytes */{size}"})
        status = 206
        headers["Content-Range"] = f"bytes {start}-{end}/{size}"
    return start, end, status, headers


class AssetsController(Controller):
    path = "/v1/assets"

    @post(
        status_code=200,
        summary="Upload a file's raw bytes as an input asset (content-addressed)",
        operation_class=RawUploadOperation,
        responses=errors(400, 413, 415),
    )
    async def upload(
        self, service: NamedDependency[RunService], request: Request[Any, Any, Any]
    ) -> AssetStored:
        ctype = request.headers.get("content-type", "")
        if ctype.startswith("multipart/form-data"):
            data = await _one_file_part(request)
        else:
            data = await request.body()
        try:
            kind, _ = sniff_kind(data)
        except AssetRefused as exc:
            code = "empty_body" if exc.status == 400 else "unsupported_media"
            raise ApiError(exc.status, code, str(exc)) from None
        bid = await anyio.to_thread.run_sync(service.put_asset, data)
        return AssetStored(id=bid, kind=kind, bytes=len(data))


async def _one_file_part(request: Request[Any, Any, Any]) -> bytes:
    """The bytes of a multipart body's one file part (``curl -F file=@photo.png``)."""
    form = await request.form()
    files = [v for _, v in form.multi_items() if isinstance(v, UploadFile)]
    if len(files) != 1:
        raise ApiError(
            415,
            "unsupported_media",
            f"A multipart upload must hold exactly one file part (this one has {len(files)}). "
            + RAW_HINT,
        )
    return await files[0].read()


class FitController(Controller):
    path = "/v1/fit"

    @get(
        summary="Will these model files run here, and how? (fits / int8 / streamed / won't fit)",
        responses=errors(400, 404, 422),
    )
    async def fit_models(
        self,
        models: NamedDependency[ModelsService],
        model: Annotated[list[str], QueryParameter(name="model", min_items=1, max_items=16)],
        vram_gb: Annotated[float | None, QueryParameter(name="vramGb", ge=0, le=4096)] = None,
        ram_gb: Annotated[float | None, QueryParameter(name="ramGb", ge=0, le=65536)] = None,
        gpus: Annotated[int | None, QueryParameter(ge=0, le=64)] = None,
        width: Annotated[int, QueryParameter(ge=8, le=16384)] = 1024,
        height: Annotated[int, QueryParameter(ge=8, le=16384)] = 1024,
    ) -> dict[str, Any]:
        try:
            return await models.fit(
                model, vram_gb=vram_gb, ram_gb=ram_gb, gpus=gpus, width=width, height=height
            )
        except UnsafeName as exc:
            raise ApiError(422, "invalid_request", str(exc)) from None
        except UnknownModel as exc:
            raise not_found(str(exc)) from None
        except HeaderError as exc:
            raise ApiError(422, "invalid_model", str(exc)) from None
