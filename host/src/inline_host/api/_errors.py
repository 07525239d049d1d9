"""Domain errors to HTTP, in one place: the contract's envelope ``{"error": {code, message, ...}}``.

Framework errors use the envelope too (an unknown path is a 404 ``not_found`` naming the route,
a wrong method a 405 ``method_not_allowed`` naming the allowed ones, a bad query parameter a 422
``invalid_request`` naming it); a malformed submission is a 422 ``invalid_request`` rather than
the reference's 500.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from inline_core import DocumentInvalid, GraphInvalid
from litestar import MediaType, Request, Response
from litestar.exceptions import (
    HTTPException,
    MethodNotAllowedException,
    NotFoundException,
    ValidationException,
)
from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR

from ..runs import Conflict, QueueFull, StorageFailing
from .anthropic import http_error as anthropic_http_error

log = logging.getLogger("inline.api")


class ApiError(Exception):
    """An error answered with the contract's envelope."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        node_id: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.node_id = node_id
        self.extra = extra or {}
        super().__init__(message)


def not_found(message: str) -> ApiError:
    """404 ``not_found``."""
    return ApiError(404, "not_found", message)


def envelope(code: str, message: str, node_id: str | None = None, **extra: Any) -> dict[str, Any]:
    """``{"error": {"code", "message"[, "nodeId"], ...}}`` (nodeId omitted, never null)."""
    body: dict[str, Any] = {"code": code, "message": message}
    if node_id is not None:
        body["nodeId"] = node_id
    body.update(extra)
    return {"error": body}


def _json(status: int, content: Any) -> Response[Any]:
    return Response(content=content, status_code=status, media_type=MediaType.JSON)


def handle_api_error(_: Request[Any, Any, Any], exc: ApiError) -> Response[Any]:
    return _json(exc.status, envelope(exc.code, exc.message, exc.node_id, **exc.extra))


def handle_invalid(_: Request[Any, Any, Any], exc: DocumentInvalid) -> Response[Any]:
    first = exc.first
    extra: dict[str, Any] = {}
    if isinstance(exc, GraphInvalid):
        extra["errors"] = [issue.to_json() for issue in exc.issues]
    return _json(422, envelope(exc.code, first.message, first.node_id, **extra))


def handle_conflict(_: Request[Any, Any, Any], exc: Conflict) -> Response[Any]:
    return _json(409, envelope("conflict", str(exc)))


def handle_queue_full(_: Request[Any, Any, Any], exc: QueueFull) -> Response[Any]:
    return Response(
        content=envelope("queue_full", str(exc)),
        status_code=429,
        media_type=MediaType.JSON,
        headers={"Retry-After": str(exc.retry_after)},
    )


def handle_storage(_: Request[Any, Any, Any], exc: StorageFailing) -> Response[Any]:
    return Response(
        content=envelope("storage_failing", str(exc)),
        status_code=503,
        media_type=MediaType.JSON,
        headers={"Retry-After": str(exc.retry_after)},
    )


def handle_http(request: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    where = f"{request.method} {request.url.path}"
    if request.url.path.startswith("/anthropic/"):  # what Anthropic's clients parse
        return anthropic_http_error(request, exc)
    if isinstance(exc, NotFoundException):
        spa = _spa_index(request)
        if spa is not None:
            return spa
        return _json(404, envelope("not_found", f"No route {where}."))
    if isinstance(exc, MethodNotAllowedException):
        allowed = (exc.headers or {}).get("Allow") or (exc.headers or {}).get("allow")
        message = f"{request.method} is not allowed on {request.url.path}."
        if allowed:
            message += f" Allowed: {allowed}."
        response = _json(405, envelope("method_not_allowed", message))
        if allowed:
            response.headers["Allow"] = allowed
        return response
    if isinstance(exc, ValidationException) or exc.status_code == 400:
        return _json(422, envelope("invalid_request", _validation_message(request, exc)))
    if exc.status_code == 413:
        return _json(413, envelope("too_large", "The request body is too large."))
    if exc.status_code == 401:
        return _json(401, envelope("unauthorized", str(exc.detail)))
    return _json(exc.status_code, {"detail": exc.detail})


_API_PREFIXES = ("/v1", "/schema", "/openapi")


def _spa_index(request: Request[Any, Any, Any]) -> Response[Any] | None:
    """A single-page app's ``index.html`` for an unknown GET outside the API (its client-side
    routes, such as ``/projects/42``), when ``--front-end-root`` serves one."""
    root = request.app.state.get("front_end_root")
    path = request.url.path
    if root is None or request.method != "GET" or path.startswith(_API_PREFIXES):
        return None
    index = Path(root) / "index.html"
    if not index.is_file():
        return None
    return Response(content=index.read_bytes(), media_type=MediaType.HTML, status_code=200)


_SOURCES = {"query": "query parameter", "path": "path parameter", "header": "header"}


def _validation_message(request: Request[Any, Any, Any], exc: HTTPException) -> str:
    """What Litestar refused, naming the parameter (``?limit=0``); else the body's problem."""
    detail = str(exc.detail or "")
    if detail.startswith("Missing required"):
        return detail.split(" for path ")[0] + "."
    extra = exc.extra if isinstance(exc.extra, list) else []
    for item in extra:
        if not isinstance(item, dict):
            continue
        raw = item.get("source", "")
        source = _SOURCES.get(str(getattr(raw, "value", raw)))
        key = str(item.get("key") or "")
        if source is not None and key:
            camel = re.sub(r"_([a-z])", lambda m: m.group(1).upper(), key)
            if camel in request.query_params:
                key = camel  # the name the client sent (vramGb), not the handler's (vram_gb)
            reason = str(item.get("message") or "invalid value").rstrip(".")
            return f"Invalid {source} {key!r}: {reason}."
    return "The request body must be a JSON object."


def handle_too_deep(_: Request[Any, Any, Any], exc: RecursionError) -> Response[Any]:
    return _json(422, envelope("invalid_request", "The request body is nested too deeply."))


def handle_unexpected(_: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    log.exception("unexpected error", exc_info=exc)
    return _json(
        HTTP_500_INTERNAL_SERVER_ERROR,
        envelope("internal", f"Internal error: {type(exc).__name__}"),
    )


EXCEPTION_HANDLERS: dict[Any, Any] = {
    ApiError: handle_api_error,
    DocumentInvalid: handle_invalid,
    Conflict: handle_conflict,
    QueueFull: handle_queue_full,
    StorageFailing: handle_storage,
    HTTPException: handle_http,
    RecursionError: handle_too_deep,
    Exception: handle_unexpected,
}
