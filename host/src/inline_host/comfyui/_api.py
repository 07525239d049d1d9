"""``POST /v1/import/comfyui``: the raw file (JSON or PNG) in, ``{graph, target, report}`` out."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, post
from litestar.di import NamedDependency
from litestar.params import QueryParameter
from litestar.status_codes import HTTP_200_OK

from ..models._service import ModelsService
from ._import import import_comfyui
from ._read import ComfyImportError


class ComfyImportController(Controller):
    """Converts a ComfyUI workflow; nothing is stored and nothing runs."""

    path = "/v1/import/comfyui"

    @post("/", status_code=HTTP_200_OK)
    async def import_workflow(
        self,
        request: Request[Any, Any, Any],
        models: NamedDependency[ModelsService],
        one_click: Annotated[bool, QueryParameter(name="oneClick")] = False,
    ) -> dict[str, Any]:
        """The run document and report for the request body (``?oneClick=true``: the
        Z-Image one-click node when the graph has that shape)."""
        import anyio

        from ..api._errors import ApiError  # here: the api package imports this module

        body = await request.body()
        mappings = models.comfyui_mappings()

        def convert() -> dict[str, Any]:
            try:
                return import_comfyui(
                    body, where="request body", mappings=mappings, one_click_node=one_click
                ).to_json()
            except ComfyImportError as exc:
                raise ApiError(422, "not_a_workflow", str(exc)) from None

        return await anyio.to_thread.run_sync(convert)
