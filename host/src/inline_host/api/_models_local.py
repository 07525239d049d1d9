"""``/v1/models/local``: the models of ``models/`` over HTTP (``inline models list / show /
remove``): each with whether a deployment serves it, one with its card, removing one.

Reading them is for this machine, or anyone holding the token (they are this machine's paths,
as downloads are); removing one also needs the operator token. A removal is refused (409,
naming them) while a deployment serves the model or a queued or running run uses it (a param
of one of its nodes names the model, ``FOLDER/NAME``, or a path inside its folder); with
``?force=true`` those runs are cancelled (and waited for) and those deployments undeployed
first. A removed model is gone from every picker at once (``/v1/models``, ``/openai/v1/models``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, ClassVar, Final

import anyio
import msgspec
from litestar import Controller, Request, Response, delete, get
from litestar.connection import ASGIConnection
from litestar.di import NamedDependency
from litestar.exceptions import NotAuthorizedException
from litestar.handlers import BaseRouteHandler
from litestar.params import FromPath, QueryParameter

from .._settings import Settings
from ..guard import bearer_matches, is_loopback
from ..importers import LocalModel, ModelNotFound, find_local, list_local, remove_local
from ..models import ModelCatalogs
from ..runs import DeploymentService, DeploymentView, Engine, RunService
from ._errors import ApiError, handle_api_error
from ._openapi import errors

#: How long a forced removal waits for the runs it cancelled to end.
SETTLE_S: Final = 60.0
LIVE: Final = frozenset({"queued", "running"})


class LocalModelList(msgspec.Struct, frozen=True):
    models: list[LocalModel]


class ModelInUse(Exception):
    """A model a deployment serves or a live run uses: not removed (the message names them)."""

    def __init__(self, model: LocalModel, deployments: list[str], runs: list[str]) -> None:
        users = []
        if deployments:
            users.append(f"deployment(s) {', '.join(deployments)}")
        if runs:
            users.append(f"run(s) {', '.join(runs)}")
        super().__init__(
            f"Model '{model.folder}/{model.name}' is in use by {' and '.join(users)}: undeploy "
            "or cancel them first, or remove it with force=true (which does both)."
        )
        self.deployments = deployments
        self.runs = runs


class LocalModelsService:
    """The models of ``settings.models_dir``, and who uses them now (deployments, runs)."""

    def __init__(
        self,
        settings: Settings,
        engine: Engine,
        runs: RunService,
        deployments: DeploymentService,
        catalogs: ModelCatalogs,
    ) -> None:
        self._models_dir = settings.models_dir
        self._engine = engine
        self._runs = runs
        self._deployments = deployments
        self._catalogs = catalogs

    async def list_all(self) -> list[LocalModel]:
        """Every model, by folder then name, each ``deployed`` when a deployment serves it."""
        found = await anyio.to_thread.run_sync(list_local, self._models_dir)
        views = self._deployments.views()
        return [self._marked(m, views) for m in found]

    async def show(self, name: str) -> LocalModel:
        """The model ``name`` (or ``FOLDER/NAME``) names, with its card; ``ModelNotFound``."""
        found = await anyio.to_thread.run_sync(find_local, self._models_dir, name)
        return self._marked(found, self._deployments.views())

    async def remove(self, name: str, *, force: bool = False) -> LocalModel:
        """Remove the model ``name`` names (``ModelInUse`` while it is used, unless ``force``:
        its runs are cancelled and its deployments undeployed first); the model removed."""
        model = await self.show(name)
        inside = await anyio.to_thread.run_sync(_places, model)
        deployments = [v.name for v in self._deployments.views() if self._serves(v, model, inside)]
        runs = self._users(model, inside)
        if (deployments or runs) and not force:
            raise ModelInUse(model, deployments, runs)
        for run_id in runs:
            await self._runs.cancel(run_id)
        with anyio.move_on_after(SETTLE_S):
            for run_id in runs:
                await self._runs.settled(run_id)
        going = [r for r in runs if (s := self._runs.state(r)) is not None and s.status in LIVE]
        if going:
            raise ApiError(409, "conflict", f"Run(s) {', '.join(going)} did not stop within "
                           f"{SETTLE_S:g} s; model '{name}' is kept: try again.")  # fmt: skip
        for deployment in deployments:
            await self._deployments.delete(deployment)
        try:
            await anyio.to_thread.run_sync(remove_local, self._models_dir, model)
        except FileNotFoundError:  # removed by another request meanwhile
            raise ModelNotFound(f"no model '{name}' in {self._models_dir}") from None
        except OSError as exc:
            raise ApiError(500, "remove_failed", f"Cannot remove {model.path}: "
                           f"{exc.strerror or exc}.") from None  # fmt: skip
        self._catalogs.forget()  # gone from the pickers now, whatever the folder's mtime says
        return msgspec.structs.replace(model, deployed=False)

    # who uses a model ----------------------------------------------------------------------
    def _marked(self, model: LocalModel, views: list[DeploymentView]) -> LocalModel:
        inside = (Path(os.path.normpath(model.path)),)
        served = any(self._serves(v, model, inside) for v in views)
        return msgspec.structs.replace(model, deployed=served) if served else model

    def _serves(self, view: DeploymentView, model: LocalModel, inside: tuple[Path, ...]) -> bool:
        """Whether deployment ``view`` serves ``model``: it names the model, and its node picks
        from the model's folder (a node no pack serves now: by the name alone)."""
        if view.model is None or not _names(view.model, model, inside):
            return False
        entry = self._engine.registry.lookup(view.node)
        if entry is None or not any(p.options_from for p in entry.descriptor.params):
            return True
        return any(p.options_from == model.folder for p in entry.descriptor.params)

    def _users(self, model: LocalModel, inside: tuple[Path, ...]) -> list[str]:
        """The queued and running runs one of whose nodes has a param naming ``model``."""
        return [
            run.id
            for run in list(self._runs.runs.values())
            if run.status in LIVE
            and any(_names(v, model, inside) for n in run.plan.nodes for v in n.params.values())
        ]


def _places(model: LocalModel) -> tuple[Path, ...]:
    """The model's path as listed and as resolved (a param may give either)."""
    listed = Path(os.path.normpath(model.path))
    return (listed, Path(model.path).resolve())


def _names(value: Any, model: LocalModel, inside: Iterable[Path]) -> bool:
    """Whether a param value names ``model``: its name, ``FOLDER/NAME[/...]``, or a path inside
    its folder (a string anywhere in lists and objects)."""
    if isinstance(value, dict):
        return any(_names(v, model, inside) for v in value.values())
    if isinstance(value, list):
        return any(_names(v, model, inside) for v in value)
    if not isinstance(value, str) or not value:
        return False
    ref = f"{model.folder}/{model.name}"
    if value in (model.name, ref) or value.startswith(ref + "/"):
        return True
    if not os.path.isabs(value):
        return False
    path = Path(os.path.normpath(value))
    return any(path.is_relative_to(place) for place in inside)


def guard_local_models(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """This machine's clients, or a server with a token (which the token middleware checked);
    a removal needs the operator token as well."""
    client = connection.client.host if connection.client else ""
    if connection.app.state.settings.token is None and not is_loopback(client):
        message = "The models of this machine are only shown to it, or with a token."
        raise ApiError(403, "forbidden", message)
    if connection.scope.get("method") != "DELETE":
        return
    if not bearer_matches(connection.headers.get("authorization"),
                          connection.app.state.operator_token):  # fmt: skip
        raise NotAuthorizedException(
            "Removing a model over HTTP needs the operator token: send 'Authorization: Bearer "
            "<token>' with INLINE_TOKEN, or with the token in <data dir>/operator-token."
        )


def handle_not_found(request: Request[Any, Any, Any], exc: ModelNotFound) -> Response[Any]:
    message = str(exc)
    return handle_api_error(request, ApiError(404, "not_found", message[:1].upper() + message[1:]))


def handle_in_use(request: Request[Any, Any, Any], exc: ModelInUse) -> Response[Any]:
    extra = {"deployments": exc.deployments, "runs": exc.runs}
    return handle_api_error(request, ApiError(409, "model_in_use", str(exc), extra=extra))


def _name(raw: str) -> str:
    return raw.lstrip("/")  # a path parameter starts with its slash


class LocalModelsController(Controller):
    path = "/v1/models/local"
    guards: ClassVar = [guard_local_models]
    exception_handlers: ClassVar = {ModelNotFound: handle_not_found, ModelInUse: handle_in_use}

    @get(summary="The models of models/: category, folder, bytes, source, whether complete and "
                 "whether a deployment serves it", responses=errors(403))  # fmt: skip
    async def list_local(self, local_models: NamedDependency[LocalModelsService]) -> LocalModelList:
        return LocalModelList(await local_models.list_all())

    @get("/{name:path}", summary="One model (NAME, or FOLDER/NAME where two folders hold one "
         "name), with its card", responses=errors(403, 404))  # fmt: skip
    async def show_local(
        self, local_models: NamedDependency[LocalModelsService], name: FromPath[str]
    ) -> LocalModel:
        return await local_models.show(_name(name))

    @delete(
        "/{name:path}",
        summary="Remove a model; refused while a deployment serves it or a run uses it, unless "
        "force (which undeploys and cancels them); needs the operator token",
        status_code=200,
        responses=errors(401, 403, 404, 409),
    )
    async def remove_local(
        self,
        local_models: NamedDependency[LocalModelsService],
        name: FromPath[str],
        force: Annotated[
            bool,
            QueryParameter(description="undeploy the deployments and cancel the runs using it"),
        ] = False,
    ) -> LocalModel:
        return await local_models.remove(_name(name), force=force)
