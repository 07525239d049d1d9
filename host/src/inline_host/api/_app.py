"""The Litestar app: /v1 routes, one lifespan that owns the engine and the run service."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from litestar import Litestar
from litestar.datastructures import State
from litestar.di import Provide
from litestar.types import Scope

from .._settings import Settings
from ..guard import HostPolicy, check_bind, operator_token, request_guard, token_middleware
from ..hub import DownloadService, ImportSources, card_requirements, secrets_reader
from ..importers import importer_for
from ..packs import PackService
from ..runs import DeploymentService, Engine, RunService, RunStore
from ._comfyui import ComfyImportController
from ._controllers import (
    AssetsController,
    FitController,
    HealthController,
    ModelsController,
    RunsController,
    TakesController,
    index,
    run_events,
)
from ._deployments_api import DeploymentsController
from ._docs import docs_assets_router, openapi_config
from ._downloads import DownloadsController, downloads_lifespan
from ._errors import EXCEPTION_HANDLERS
from ._models import ModelsService
from ._models_local import LocalModelsController, LocalModelsService
from ._packs_api import PacksController
from ._system import SystemService
from .anthropic import AnthropicController
from .openai import OpenAIController, OpenAIEmbeddingsController, OpenAIImagesController

log = logging.getLogger("inline.api")


# Providers read the app's state through the ASGI scope: a ``state: State`` parameter would
# have Litestar build a new ``State`` (and its lock) for every request that injects a service.
def provide_models(scope: Scope) -> ModelsService:
    """Descriptors and models over the engine the lifespan opened."""
    return scope["app"].state.models


def provide_system(scope: Scope) -> SystemService:
    """Health over the running engine."""
    return scope["app"].state.system


def provide_service(scope: Scope) -> RunService:
    """The run service the lifespan started."""
    return scope["app"].state.service


def provide_downloads(scope: Scope) -> DownloadService:
    """The downloads service its lifespan started."""
    return scope["app"].state.downloads


def provide_packs(scope: Scope) -> PackService:
    """The pack service over the running engine."""
    return scope["app"].state.packs


def provide_deployments(scope: Scope) -> DeploymentService:
    """The deployments the lifespan brought back and keeps."""
    return scope["app"].state.deployments


def provide_local_models(scope: Scope) -> LocalModelsService:
    """The models of the models dir, and who uses them."""
    return scope["app"].state.local_models


#: The module a download through an importer runs as its child.
IMPORT_JOB = "inline_host.importers._job"


def import_sources(settings: Settings) -> ImportSources:
    """The sources beyond the Hub the downloads service fetches: every importer's."""
    return ImportSources(
        plan=lambda source, task, models_dir: importer_for(
            source, task=task, models_dir=models_dir, settings=settings
        ),
        job=IMPORT_JOB,
    )


def create_app(settings: Settings | None = None, *, front_end_root: Path | None = None) -> Litestar:
    """The /v1 app over an engine opened in its lifespan."""
    settings = settings or Settings.from_env()
    check_bind(settings)

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        secrets = secrets_reader(settings.data_dir)
        async with Engine.open(settings, say=log.info, secrets=secrets) as engine:
            store = RunStore(settings.db_path)
            service = RunService(engine, store)
            deployments = DeploymentService(engine, store, requirements=card_requirements)
            app.state.settings = settings
            app.state.operator_token = operator_token(settings.data_dir, settings.token)
            app.state.service = service
            app.state.deployments = deployments
            app.state.models = ModelsService(engine, settings)
            app.state.local_models = LocalModelsService(
                settings, engine, service, deployments, engine.catalogs
            )
            app.state.system = SystemService(engine, service, settings, deployments)
            app.state.packs = PackService(engine)
            try:
                async with anyio.create_task_group() as tg:
                    resumed = await service.start(tg)
                    if resumed:
                        log.info("resumed %d interrupted run(s)", resumed)
                    kept = await deployments.start(tg)
                    if kept:
                        log.info("brought back %d deployment(s)", kept)
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
        DeploymentsController,
        LocalModelsController,
        ComfyImportController,
        DownloadsController,
        OpenAIController,  # /openai/v1
        AnthropicController,  # /anthropic/v1
        OpenAIImagesController,
        OpenAIEmbeddingsController,
        run_events,
        docs_assets_router(),
    ]
    if front_end_root is None:
        handlers.append(index)
    else:
        from litestar.static_files import create_static_files_router

        handlers.append(
            create_static_files_router(path="/", directories=[front_end_root], html_mode=True)
        )
    return Litestar(
        route_handlers=handlers,
        lifespan=[lifespan, downloads_lifespan(settings, import_sources(settings))],
        state=State({"front_end_root": front_end_root}),
        dependencies={
            "models": Provide(provide_models, sync_to_thread=False),
            "system": Provide(provide_system, sync_to_thread=False),
            "service": Provide(provide_service, sync_to_thread=False),
            "packs": Provide(provide_packs, sync_to_thread=False),
            "downloads": Provide(provide_downloads, sync_to_thread=False),
            "deployments": Provide(provide_deployments, sync_to_thread=False),
            "local_models": Provide(provide_local_models, sync_to_thread=False),
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
