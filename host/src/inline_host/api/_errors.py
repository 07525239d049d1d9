"""Domain errors to HTTP, in one place: the contract's envelope ``{"error": {code, message, ...}}``.

Framework errors keep the reference's ``{"detail": ...}`` bodies (unknown path 404, wrong method
405); a malformed submission is a 422 ``invalid_request`` rather than the reference's 500.
"""

from __future__ import annotations

import logging
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

from ..runs._service import Conflict

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


def handle_http(_: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    if isinstance(exc, NotFoundException):
        return _json(404, {"detail": "Not Found"})
    if isinstance(exc, MethodNotAllowedException):
        return _json(405, {"detail": "Method Not Allowed"})
    if isinstance(exc, ValidationException) or exc.status_code == 400:
        return _json(422, envelope("invalid_request", "The request body must be a JSON object."))
    if exc.status_code == 413:
        return _json(413, envelope("too_large", "The request body is too large."))
    if exc.status_code == 401:
        return _json(401, envelope("unauthorized", str(exc.detail)))
    return _json(exc.status_code, {"detail": exc.detail})


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
    HTTPException: handle_http,
    Exception: handle_unexpected,
}
