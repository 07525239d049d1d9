"""``/v1/downloads``: what a UI's model popup calls. Loopback clients, or anyone holding the
token (downloads write to disk, as pack management does); starting and cancelling one also
needs the operator token (``guard._operator``), which a web page cannot read, so that no page
can fill the disk or name a secret. Past ``INLINE_MAX_DOWNLOADS`` running, downloads queue.

A source is any importer's (``hf:ORG/NAME``, ``url:https://.../x.safetensors``,
``file:/path/to/folder``, a plugin's): the top hands the importers in (``ImportSources``)."""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, ClassVar

import anyio
import msgspec
from litestar import Controller, Litestar, Request, Response, delete, get, post
from litestar.connection import ASGIConnection
from litestar.di import NamedDependency
from litestar.handlers import BaseRouteHandler
from litestar.params import FromPath, JSONBody

from .._settings import Settings
from ..guard import guard_operator
from ..hub import DownloadRefused, DownloadService, ImportSources


class DownloadBody(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    """``{"source": "hf:ORG/NAME[@REV]"}`` (or ``url:...``, ``file:...``, a plugin's source) or
    ``{"node": "alibaba/z-image-turbo"}``; ``task`` says what kind of model a source is (a
    category: ``llm``, ``vae``..., as ``--as``); for a gated repo, ``tokenSecret`` names the
    secret holding a Hub token (stored for service ``hf``; else the server's ``HF_TOKEN``)."""

    source: str | None = None
    node: str | None = None
    token_secret: str | None = None
    task: str | None = None


def _error(status: int, code: str, message: str) -> Response[Any]:
    return Response({"error": {"code": code, "message": message}}, status_code=status)


def _loopback(host: str | None) -> bool:
    try:
        return host is not None and ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def guard_downloads(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Refuse remote clients unless the server has a token (the token middleware checked it)."""
    service: DownloadService = connection.app.state.downloads
    client = connection.client.host if connection.client else None
    if service.settings.token is None and not _loopback(client):
        raise DownloadRefused(
            403, "Downloads are only available from this machine or with a token."
        )


def handle_refused(_: Request[Any, Any, Any], exc: DownloadRefused) -> Response[Any]:
    codes = {403: "forbidden", 404: "not_found", 422: "invalid", 429: "too_many",
             502: "unreachable", 503: "unavailable"}  # fmt: skip
    response = _error(exc.status, codes.get(exc.status, "invalid"), str(exc))
    if exc.retry_after is not None:
        response.headers["Retry-After"] = str(exc.retry_after)
    return response


class DownloadsController(Controller):
    path = "/v1/downloads"
    guards: ClassVar = [guard_downloads, guard_operator]
    exception_handlers: ClassVar = {DownloadRefused: handle_refused}

    @post(summary="Start (or queue) a download: a model source (hf:ORG/NAME, url:..., "
                  "file:..., a plugin's) or a node's recommended files; needs the operator "
                  "token", status_code=202)  # fmt: skip
    async def start(
        self, downloads: NamedDependency[DownloadService], data: JSONBody[DownloadBody]
    ) -> dict[str, Any]:
        d = await downloads.start(
            data.source, data.node, token_secret=data.token_secret, task=data.task
        )
        return {"downloadId": d.id, **d.view()}

    @get(summary="Every download of this server, newest first")
    async def list_downloads(self, downloads: NamedDependency[DownloadService]) -> dict[str, Any]:
        views = [d.view() for d in downloads.downloads.values()]
        return {"downloads": sorted(views, key=lambda v: -v["createdAt"])}

    @get("/{download_id:str}", summary="Progress: bytes done and total per file, and state")
    async def progress(
        self, downloads: NamedDependency[DownloadService], download_id: FromPath[str]
    ) -> dict[str, Any]:
        return downloads.get(download_id).view()

    @delete("/{download_id:str}", summary="Cancel a download (staged bytes stay, to resume); "
            "needs the operator token", status_code=200)  # fmt: skip
    async def cancel(
        self, downloads: NamedDependency[DownloadService], download_id: FromPath[str]
    ) -> dict[str, Any]:
        return (await downloads.cancel(download_id)).view()


def downloads_lifespan(
    settings: Settings, sources: ImportSources | None = None
) -> Callable[[Litestar], AbstractAsyncContextManager[None]]:
    """A lifespan that owns the downloads service (``app.state.downloads``), which fetches
    ``sources`` beyond the Hub."""

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        service = DownloadService(settings, sources)
        app.state.downloads = service
        async with anyio.create_task_group() as tg:
            await service.run(tg)
            try:
                yield
            finally:
                with anyio.CancelScope(shield=True):
                    await service.stop()
                tg.cancel_scope.cancel()

    return lifespan
