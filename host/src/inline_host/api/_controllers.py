"""The /v1 resources: one controller each; services come in by dependency injection."""

from __future__ import annotations

import email.utils
import mimetypes
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

import anyio
import msgspec
from inline_core import HeaderError
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
from litestar.params import Parameter
from litestar.response import Stream

from .._blobs import BlobStore
from .._catalogs import CATEGORIES, UnsafeName
from .._engine import Engine
from .._fit import budget_from_env, fit, fit_answer, inventory_for
from .._inventory import probe
from .._service import RunService, take_view
from .._views import RunState, RunSummary, Submitted, Take
from ._errors import ApiError, not_found

TAKE_ID = re.compile(r"^take_[0-9a-f]{12}$")
CONTENT_TYPES = {
    "png": "image/png",
    "jpg": "image/jpeg",
    "webp": "image/webp",
    "mp4": "video/mp4",
    "webm": "video/webm",
    "wav": "audio/wav",
    "mp3": "audio/mpeg",
    "txt": "text/plain",
    "glb": "model/gltf-binary",
}


class Health(msgspec.Struct, frozen=True, rename="camel"):
    ok: bool
    api_version: str
    schema_versions: dict[str, int]
    registry_version: str
    device: dict[str, Any]
    workers: dict[str, Any]
    #: The memory broker: budget per device, what each worker holds, each model's plan.
    memory: dict[str, Any] = {}


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


class HealthController(Controller):
    path = "/v1/health"

    @get(summary="Engine health, registry version and device budget")
    async def health(self, engine: Engine) -> Health:
        inventory = await anyio.to_thread.run_sync(probe)
        budget = budget_from_env()
        profile = os.environ.get("INLINE_PROFILE") or ("gpu-max" if inventory.gpus else "cpu")
        mb = 1 << 20
        gpu = inventory.gpus[0] if inventory.gpus else None
        vram_budget = None
        if gpu is not None:
            vram_budget = (budget.vram_bytes or gpu.total_bytes) // mb
        device = {
            "kind": "cuda" if gpu is not None and profile != "cpu" else "cpu",
            "profile": profile,
            "vramBudgetMb": vram_budget,
            "vramFreeMb": None if gpu is None else gpu.free_bytes // mb,
            "ramFreeMb": inventory.ram_free_bytes // mb,
            "ramTotalMb": inventory.ram_total_bytes // mb,
            "gpus": [
                {
                    "index": g.index,
                    "name": g.name,
                    "totalMb": g.total_bytes // mb,
                    "freeMb": g.free_bytes // mb,
                    "bf16": g.bf16,
                }
                for g in inventory.gpus
            ],
        }
        workers = {
            pack: {"pid": w.pid, "generation": w.generation, "callsInFlight": len(w.running)}
            for pack, w in engine.supervisor.workers().items()
        }
        return Health(
            ok=True,
            api_version="v1",
            schema_versions={"min": 1, "max": 1},
            registry_version=engine.registry_version(),
            device=device,
            workers=workers,
            memory=engine.supervisor.broker.snapshot(),
        )


class ModelsController(Controller):
    path = "/v1/models"

    @get(summary="Every node descriptor (ETag: the registry version)")
    async def list_models(self, engine: Engine, request: Request[Any, Any, Any]) -> Response[Any]:
        raw = request.scope.get("raw_path") or request.scope["path"].encode()
        if raw.split(b"?")[0].endswith(b"/"):
            raise not_found("Unknown node type ''.")  # GET /v1/models/ (contract 3.2)
        await engine.refresh()
        version = engine.registry_version()
        etag = f'"{version}"'
        match = request.headers.get("if-none-match")
        if match is not None and etag in {t.strip().removeprefix("W/") for t in match.split(",")}:
            return Response(content=b"", status_code=304)
        body = ModelList(registry_version=version, models=engine.descriptors())
        return Response(
            content=msgspec.json.encode(body), media_type=MediaType.JSON, headers={"ETag": etag}
        )

    @get("/{node_type:path}", summary="One node descriptor (the type contains slashes)")
    async def get_model(self, engine: Engine, node_type: str) -> Response[Any]:
        await engine.refresh()
        node_type = node_type.lstrip("/")
        descriptor = engine.descriptor(node_type) if node_type else None
        if descriptor is None:
            raise not_found(f"Unknown node type '{node_type}'.")
        return Response(content=msgspec.json.encode(descriptor), media_type=MediaType.JSON)


class RunsController(Controller):
    path = "/v1/runs"

    @post(
        summary="Submit a run: 201 new, 200 replay of a clientRunId, 409 conflict, 422",
        status_code=201,
    )
    async def submit(self, service: RunService, data: dict[str, Any]) -> Response[Submitted]:
        await service.engine.refresh()
        run_id, status, created = await service.submit(data)
        return Response(Submitted(run_id, status), status_code=201 if created else 200)

    @get(summary="Unfinished runs in submission order")
    async def list_runs(self, service: RunService) -> RunList:
        return RunList(runs=service.live())

    @get("/{run_id:str}", summary="A run's full state")
    async def get_run(self, service: RunService, run_id: str) -> RunState:
        state = service.state(run_id)
        if state is None:
            raise not_found(f"No run '{run_id}'.")
        return state

    @delete("/{run_id:str}", status_code=200, summary="Cancel a run")
    async def cancel_run(self, service: RunService, run_id: str) -> Submitted:
        if not service.cancel(run_id):
            raise not_found(f"No run '{run_id}'.")
        return Submitted(run_id, "cancelled")


@websocket("/v1/runs/{run_id:str}/events")
async def run_events(socket: WebSocket[Any, Any, Any], run_id: str) -> None:
    """``WS /v1/runs/{runId}/events``: a snapshot, then events until the terminal one."""
    service: RunService = socket.app.state.service
    found = service.subscribe(run_id)
    if found is None:
        await socket.close(code=4404, reason=f"No run '{run_id}'.")
        return
    sub, snapshot = found
    await socket.accept()
    try:
        payload = {"type": "snapshot", "runId": run_id, "state": snapshot}
        await socket.send_data(msgspec.json.encode(payload).decode(), mode="text")
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

    @get(summary="Take history, newest first (filter by nodeId and/or runId)")
    async def history(
        self,
        service: RunService,
        node_id: Annotated[str | None, Parameter(query="nodeId")] = None,
        run_id: Annotated[str | None, Parameter(query="runId")] = None,
        limit: Annotated[int, Parameter(ge=1, le=1000)] = 100,
    ) -> TakeList:
        records = service.store.history(node_id=node_id, run_id=run_id, limit=limit)
        return TakeList(takes=[take_view(t) for t in records])

    @get("/{take_id:str}", summary="A take")
    async def get_take(self, service: RunService, take_id: str) -> Take:
        record = service.store.get_take(take_id) if TAKE_ID.match(take_id) else None
        if record is None:
            raise not_found(f"No take '{take_id}'.")
        return take_view(record)

    @get("/{take_id:str}/bytes", summary="A take's bytes (Range supported)")
    async def get_bytes(
        self, service: RunService, take_id: str, request: Request[Any, Any, Any]
    ) -> Response[Any]:
        record = service.store.get_take(take_id) if TAKE_ID.match(take_id) else None
        if record is None:
            raise not_found(f"No take '{take_id}'.")
        blobs: BlobStore = service.engine.blobs
        path = blobs.path(record.hash)
        if not path.is_file():
            raise not_found("Take bytes are not available.")
        return ranged_file(
            path,
            CONTENT_TYPES.get(record.ext) or _guess(record.ext),
            record.hash,
            request.headers.get("range"),
        )


def _guess(ext: str) -> str:
    return mimetypes.guess_type(f"x.{ext}")[0] or "application/octet-stream"


RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


def ranged_file(
    path: Path, content_type: str, etag: str, range_header: str | None
) -> Response[Any]:
    """The file, or the part a single ``Range: bytes=a-b`` asks for (206), with validators."""
    size = path.stat().st_size
    headers = {
        "Accept-Ranges": "bytes",
        "ETag": f'"{etag}"',
        "Last-Modified": email.utils.formatdate(path.stat().st_mtime, usegmt=True),
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
    headers["Content-Length"] = str(end - start + 1)

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


class AssetsController(Controller):
    path = "/v1/assets"

    @post(status_code=200, summary="Upload raw bytes as an input asset (content-addressed)")
    async def upload(self, engine: Engine, request: Request[Any, Any, Any]) -> AssetStored:
        data = await request.body()
        ctype = request.headers.get("content-type", "")
        kind = next((k for k in ("image", "video", "audio") if ctype.startswith(k + "/")), "image")
        bid = await anyio.to_thread.run_sync(engine.blobs.put_bytes, data)
        return AssetStored(id=bid, kind=kind, bytes=len(data))


class FitController(Controller):
    path = "/v1/fit"

    @get(summary="Will these model files run here, and how? (fits / int8 / streamed / won't fit)")
    async def fit_models(
        self,
        engine: Engine,
        model: Annotated[list[str], Parameter(query="model", min_items=1, max_items=16)],
        vram_gb: Annotated[float | None, Parameter(query="vramGb", ge=0, le=4096)] = None,
        ram_gb: Annotated[float | None, Parameter(query="ramGb", ge=0, le=65536)] = None,
        gpus: Annotated[int | None, Parameter(ge=0, le=64)] = None,
        width: Annotated[int, Parameter(ge=8, le=16384)] = 1024,
        height: Annotated[int, Parameter(ge=8, le=16384)] = 1024,
    ) -> dict[str, Any]:
        paths = []
        for ref in model:
            category, _, name = ref.partition("/")
            try:
                found = engine.catalogs.find(category, name) if category in CATEGORIES else None
            except UnsafeName as exc:
                raise ApiError(422, "invalid_request", str(exc)) from None
            if found is None:
                raise not_found(
                    f"No model '{ref}' (expected <category>/<name>, e.g. "
                    "diffusion_models/model.safetensors)."
                )
            paths.append(found)
        inventory = inventory_for(vram_gb, ram_gb, gpus)
        try:
            placement, estimate = await anyio.to_thread.run_sync(
                lambda: fit(
                    paths,
                    inventory,
                    profile=os.environ.get("INLINE_PROFILE", "gpu-max"),
                    budget=budget_from_env(),
                    width=width,
                    height=height,
                )
            )
        except HeaderError as exc:
            raise ApiError(422, "invalid_model", str(exc)) from None
        return fit_answer(placement, estimate)
