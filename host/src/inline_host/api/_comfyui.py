"""``POST /v1/import/comfyui``: the raw file (JSON or PNG) in, ``{graph, target, report}`` out.

A conversion runs in a worker thread, ``CONVERSIONS`` at once (the others wait their turn), each
within ``TIME_LIMIT``. A thread cannot be cancelled, and the process cannot exit while one runs:
so when the client goes, or the host stops (its request task is cancelled), the conversion's
``Budget`` is stopped and the thread ends at its next check.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, Final, TypeVar

from litestar import Controller, Request, post
from litestar.di import NamedDependency
from litestar.params import QueryParameter
from litestar.status_codes import HTTP_200_OK

from ..comfyui import (
    TIME_LIMIT,
    Budget,
    ComfyImportError,
    ImportStopped,
    TooManyNodes,
    WorkflowTooLarge,
    import_comfyui,
)
from ._errors import ApiError
from ._models import ModelsService

if TYPE_CHECKING:
    from anyio import CancelScope, CapacityLimiter

T = TypeVar("T")

#: How many conversions run at once, host-wide (each holds a thread and up to ``MAX_TEXT``).
CONVERSIONS: Final = 2
#: Where the app keeps the conversions' limiter (made on first use, in the app's event loop).
LIMITER_KEY: Final = "comfyui_conversions"
#: Messages read while waiting for the client to go (after the body, only a disconnect comes).
MAX_MESSAGES: Final = 16
#: What a client that went gets (nobody reads it): nginx's "client closed request".
CLIENT_GONE: Final = 499


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
        body = await request.body()
        mappings = models.comfyui_mappings()
        stop = threading.Event()

        def convert() -> dict[str, Any] | ComfyImportError:
            budget = Budget.start("request body", TIME_LIMIT, stop)
            try:
                return import_comfyui(
                    body, where=budget.where, mappings=mappings, one_click_node=one_click,
                    budget=budget,
                ).to_json()  # fmt: skip
            except ComfyImportError as exc:  # returned: a task group would wrap it
                return exc

        result = await run_stoppable(convert, stop, limiter(request), request.receive)
        if result is None:
            raise ApiError(CLIENT_GONE, "client_gone", "the client went before the import ended")
        if isinstance(result, ComfyImportError):
            raise http_error(result)
        return result


def limiter(request: Request[Any, Any, Any]) -> CapacityLimiter:
    """The app's limiter of conversions (one per app, so per event loop)."""
    import anyio

    state = request.app.state
    found = state.get(LIMITER_KEY)
    if found is None:
        found = state[LIMITER_KEY] = anyio.CapacityLimiter(CONVERSIONS)
    return found


async def run_stoppable(
    fn: Callable[[], T],
    stop: threading.Event,
    limiter: CapacityLimiter,
    receive: Callable[[], Awaitable[Any]],
) -> T | None:
    """``fn()`` in a worker thread under ``limiter``; ``None`` when the client went first.
    ``stop`` is set when the client goes or this task is cancelled: ``fn`` checks it, so its
    thread ends soon after (waiting for it, never abandoning it, keeps the limiter honest)."""
    import anyio

    result: T | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(_stop_when_gone, receive, stop, tg.cancel_scope)
        result = await anyio.to_thread.run_sync(fn, limiter=limiter)
        tg.cancel_scope.cancel()
    return result


async def _stop_when_gone(
    receive: Callable[[], Awaitable[Any]], stop: threading.Event, scope: CancelScope
) -> None:
    import anyio

    try:
        for _ in range(MAX_MESSAGES):
            message = await receive()
            if message.get("type") == "http.disconnect":
                scope.cancel()  # a conversion still waiting for its turn never starts
                return
        await anyio.sleep_forever()
    finally:
        stop.set()  # gone, finished or cancelled: the thread stops at its next check


def http_error(exc: ComfyImportError) -> ApiError:
    """The HTTP error for what the importer refused."""
    match exc:
        case WorkflowTooLarge():
            return ApiError(413, "workflow_too_large", str(exc), extra={"limit": exc.limit})
        case TooManyNodes():
            extra = {"count": exc.count, "limit": exc.limit} if exc.count < 2**53 else {}
            return ApiError(422, "too_many_nodes", str(exc), extra=extra)
        case ImportStopped(timed_out=True):
            return ApiError(422, "import_timed_out", str(exc))
        case ImportStopped():
            return ApiError(CLIENT_GONE, "client_gone", str(exc))
        case _:
            return ApiError(422, "not_a_workflow", str(exc))
