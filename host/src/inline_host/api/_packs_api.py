"""Pack management over HTTP: only for loopback clients, or for anyone holding the token."""

from __future__ import annotations

import ipaddress
from dataclasses import asdict
from typing import Any, ClassVar

import msgspec
from inline_registry import PackNotInstalled, RegistryError, ScanRefused
from litestar import Controller, Request, Response, delete, get, post
from litestar.connection import ASGIConnection
from litestar.di import NamedDependency
from litestar.handlers import BaseRouteHandler
from litestar.params import FromPath, JSONBody

from ..guard import guard_operator
from ..packs import PackService
from ._errors import ApiError, handle_api_error
from ._openapi import errors


class InstallBody(msgspec.Struct, frozen=True, rename="camel"):
    source: str
    ref: str | None = None
    allow: list[str] = []
    allow_local_sources: bool = False


class UpgradeBody(msgspec.Struct, frozen=True):
    to: str | None = None
    allow: list[str] = []


class NodeSwitch(msgspec.Struct, frozen=True):
    type: str
    enabled: bool


def _loopback(host: str | None) -> bool:
    try:
        return host is not None and ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def guard_packs(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Pack operations run code: refuse remote clients unless the server has a token (which
    the token middleware already checked)."""
    token = connection.app.state.settings.token
    client = connection.client.host if connection.client else None
    if token is None and not _loopback(client):
        raise ApiError(
            403, "forbidden", "Pack management is only available from this machine or with a token."
        )


def _jsonable(result: Any) -> dict[str, Any]:
    out = asdict(result)
    if getattr(result, "scan", None) is not None:
        out["scan"] = msgspec.to_builtins(result.scan)
    return {_camel(k): v for k, v in out.items()}


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(p.title() for p in rest)


def handle_registry_error(_: Request[Any, Any, Any], exc: RegistryError) -> Response[Any]:
    """Pack failures as the contract's error envelope."""
    return handle_api_error(_, _error(exc))


def _error(exc: RegistryError) -> ApiError:
    if isinstance(exc, PackNotInstalled):
        return ApiError(404, "not_found", str(exc))
    if isinstance(exc, ScanRefused):
        code = "scan_blocked" if exc.blocked else "consent_required"
        return ApiError(409, code, str(exc), extra={"blocked": exc.blocked, "consent": exc.consent})
    return ApiError(422, "pack_refused", str(exc))


class PacksController(Controller):
    path = "/v1/packs"
    guards: ClassVar = [guard_packs, guard_operator]
    exception_handlers: ClassVar = {RegistryError: handle_registry_error}

    @get(summary="Installed packs: name, version, SDK, node ids, venv size, state")
    async def list_packs(self, packs: NamedDependency[PackService]) -> dict[str, Any]:
        return {"packs": [_jsonable(r) for r in await packs.list()]}

    @post(
        summary="Install a pack from a folder, wheel, name==version or git URL",
        status_code=201,
        responses=errors(404, 409, 422),
    )
    async def install(
        self, packs: NamedDependency[PackService], data: JSONBody[InstallBody]
    ) -> dict[str, Any]:
        result = await packs.install(
            data.source,
            ref=data.ref,
            allow=data.allow,
            allow_local_sources=data.allow_local_sources,
        )
        return _jsonable(result)

    @post(
        "/{name:str}/upgrade",
        summary="Upgrade a pack (to a version)",
        status_code=200,
        responses=errors(404, 409, 422),
    )
    async def upgrade(
        self, packs: NamedDependency[PackService], name: FromPath[str], data: JSONBody[UpgradeBody]
    ) -> dict[str, Any]:
        return _jsonable(await packs.upgrade(name, to=data.to, allow=data.allow))

    @post(
        "/{name:str}/rollback",
        summary="Switch back to the previous version",
        status_code=200,
        responses=errors(404, 409, 422),
    )
    async def rollback(
        self, packs: NamedDependency[PackService], name: FromPath[str]
    ) -> dict[str, Any]:
        return _jsonable(await packs.rollback(name))

    @delete(
        "/{name:str}", summary="Remove a pack", status_code=200, responses=errors(404, 409, 422)
    )
    async def remove(
        self, packs: NamedDependency[PackService], name: FromPath[str]
    ) -> dict[str, Any]:
        await packs.remove(name)
        return {"removed": name}

    @post(
        "/sync",
        summary="Rebuild every venv exactly from the lock",
        status_code=200,
        responses=errors(404, 409, 422),
    )
    async def sync(self, packs: NamedDependency[PackService]) -> dict[str, Any]:
        results = await packs.sync()
        return {"packs": [_jsonable(r) for r in results]}

    @post(
        "/nodes",
        summary="Enable or disable one node type, live",
        status_code=200,
        responses=errors(404, 409, 422),
    )
    async def switch(
        self, packs: NamedDependency[PackService], data: JSONBody[NodeSwitch]
    ) -> Response[Any]:
        await packs.set_node_enabled(data.type, data.enabled)
        return Response({"type": data.type, "enabled": data.enabled})
