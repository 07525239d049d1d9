"""The Litestar app: /v1 routes, one lifespan that owns the engine and the run service."""

from __future__ import annotations

import hmac
import ipaddress
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from litestar import Litestar
from litestar.datastructures import State
from litestar.di import Provide
from litestar.types import ASGIApp, Receive, Scope, Send

from .._settings import Settings
from .._system import SystemService
from ..comfyui._api import ComfyImportController
from ..guard import HostPolicy, operator_token, request_guard
from ..hub import DownloadsController, DownloadService, downloads_lifespan
from ..models._service import ModelsService
from ..openai import OpenAIController
from ..openai._images import OpenAIImagesController
from ..packs._service import PackService
from ..runs._engine import Engine
from ..runs._service import RunService
from ..runs._store import RunStore
from ._controllers import (
    AssetsController,
    FitController,
    HealthController,
    ModelsController,
    RunsController,
    TakesController,
    run_events,
)
from ._docs import docs_assets_router, openapi_config
from ._errors import EXCEPTION_HANDLERS
from ._packs_api import PacksController

log = logging.getLogger("inline.api")


UNAUTHORIZED = b'{"error":{"code":"unauthorized","message":"A valid bearer token is required."}}'


class InsecureBind(RuntimeError):
    """Listening beyond loopback without a token."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine."""
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(settings: Settings) -> None:
    """Refuse to serve beyond loopback without a token."""
    if not is_loopback(settings.host) and not settings.token:
        raise InsecureBind(
            f"Refusing to listen on {settings.host}: binding beyond loopback requires a token "
            "(--token TOKEN or INLINE_TOKEN)"
        )


def token_middleware(token: str | None) -> Any:
    """An ASGI middleware that checks ``Authorization: Bearer`` (or ``?token=`` on websockets)."""

    def factory(app: ASGIApp) -> ASGIApp:
        async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
            if token is None or scope["type"] not in ("http", "websocket"):
                await app(scope, receive, send)
                return
            headers = {
                k.decode("latin-1").lower(): v.decode("latin-1")  # 0xff is a 401, not a 500
                for k, v in scope.get("headers", [])
            }
            given = headers.get("authorization", "").removeprefix("Bearer ").strip()
            if not given and scope["type"] == "websocket":
                query = scope.get("query_string", b"").decode()
                given = next((p[6:] for p in query.split("&") if p.startswith("token=")), "")
            if hmac.compare_digest(given.encode("latin-1"), token.encode()):
                await app(scope, receive, send)
                return
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 4401})
                return
            body = (
                b'{"error":{"code":"unauthorized","message":"A valid bearer token is required."}}'
            )
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        (b"www-authenticate", b"Bearer"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})

        return middleware

    return factory


def provide_models(state: State) -> ModelsService:
    """Descriptors and models over the engine the lifespan opened."""
    return state.models


def provide_system(state: State) -> SystemService:
    """Health over the running engine."""
    return state.system


def provide_service(state: State) -> RunService:
    """The run service the lifespan started."""
    return state.service


def provide_downloads(state: State) -> DownloadService:
    """The downloads service its lifespan started."""
    return state.downloads


def provide_packs(state: State) -> PackService:
    """The pack service over the running engine."""
    return state.packs


def create_app(settings: Settings | None = None, *, front_end_root: Path | None = None) -> Litestar:
    """The /v1 app over an engine opened in its lifespan."""
    settings = settings or Settings.from_env()
    check_bind(settings)

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        async with Engine.open(settings, say=log.info) as engine:
            store = RunStore(settings.db_path)
            service = RunService(engine, store)
            app.state.settings = settings
            app.state.operator_token = operator_token(settings.data_dir, settings.token)
            app.state.service = service
            app.state.models = ModelsService(engine, settings)
            app.state.system = SystemService(engine, service, settings)
            app.state.packs = PackService(engine)
            try:
                async with anyio.create_task_group() as tg:
                    resumed = await service.start(tg)
                    if resumed:
                        log.info("resumed %d interrupted run(s)", resumed)
                    try:
                        yield
                    finally:
                        tg.cancel_scope.cancel()
            finally:
                store.close()

    handlers: list[Any] = [
        HealthController,
        ModelsController,
        RunsController,
        TakesController,
        AssetsController,
        FitController,
        PacksController,
        ComfyImportController,
        DownloadsController,
        OpenAIController,  # /openai/v1
        OpenAIImagesController,
        run_events,
        docs_assets_router(),
    ]
    if front_end_root is not None:
        from litestar.static_files import create_static_files_router

        handlers.append(
            create_static_files_router(path="/", directories=[front_end_root], html_mode=True)
        )
    return Litestar(
        route_handlers=handlers,
        lifespan=[lifespan, downloads_lifespan(settings)],
        state=State({"front_end_root": front_end_root}),
        dependencies={
            "models": Provide(provide_models, sync_to_thread=False),
            "system": Provide(provide_system, sync_to_thread=False),
            "service": Provide(provide_service, sync_to_thread=False),
            "packs": Provide(provide_packs, sync_to_thread=False),
            "downloads": Provide(provide_downloads, sync_to_thread=False),
        },
        exception_handlers=EXCEPTION_HANDLERS,
        middleware=[
            request_guard(HostPolicy(settings.host, settings.allowed_hosts)),
            token_middleware(settings.token),
        ],
        openapi_config=openapi_config(),
        request_max_body_size=settings.max_upload_bytes,
        debug=False,
    )
