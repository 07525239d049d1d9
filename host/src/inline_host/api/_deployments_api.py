"""Deployments over HTTP: ``/v1/deployments``, every route behind the operator token."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from litestar import Controller, Response, delete, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody, QueryParameter

from ..guard import guard_operator_always
from ..runs import DeploymentError, DeploymentExists, DeploymentService, DeploymentView
from ._errors import ApiError, not_found
from ._openapi import errors


class DeploymentsController(Controller):
    path = "/v1/deployments"
    guards: ClassVar = [guard_operator_always]

    @post(
        summary="Deploy a node (or a model) on N replicas, or between min and max",
        status_code=201,
        responses=errors(401, 409, 422),
    )
    async def deploy(
        self,
        deployments: NamedDependency[DeploymentService],
        data: JSONBody[dict[str, Any]],
        wait: Annotated[
            bool, QueryParameter(description="answer once every replica is up")
        ] = False,
        timeout: Annotated[float, QueryParameter(ge=0, le=3600)] = 600.0,
    ) -> Response[DeploymentView]:
        try:
            view = await deployments.create(data)
        except DeploymentExists as exc:
            raise ApiError(409, "conflict", str(exc)) from None
        except DeploymentError as exc:
            raise ApiError(422, "invalid_deployment", str(exc)) from None
        if wait:
            view = await deployments.until_ready(view.name, timeout) or view
        return Response(view, status_code=201)

    @get(summary="Every deployment: its replicas and where, state, load and queue")
    async def list_deployments(
        self, deployments: NamedDependency[DeploymentService]
    ) -> dict[str, list[DeploymentView]]:
        return {"deployments": deployments.views()}

    @get("/{name:str}", summary="One deployment", responses=errors(401, 404))
    async def get_deployment(
        self, deployments: NamedDependency[DeploymentService], name: FromPath[str]
    ) -> DeploymentView:
        view = deployments.view(name)
        if view is None:
            raise not_found(f"No deployment '{name}'.")
        return view

    @delete(
        "/{name:str}",
        summary="Undeploy: the replicas stop once their calls end",
        status_code=200,
        responses=errors(401, 404),
    )
    async def undeploy(
        self, deployments: NamedDependency[DeploymentService], name: FromPath[str]
    ) -> dict[str, str]:
        if not await deployments.delete(name):
            raise not_found(f"No deployment '{name}'.")
        return {"undeployed": name}
