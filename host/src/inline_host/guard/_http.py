"""Requests a browser page on another site could forge, refused before any route runs.

* ``Host`` must name this server: a loopback name, the listen address, or one of
  ``INLINE_ALLOWED_HOSTS`` (``*`` allows any). This defeats DNS rebinding.
* An ``Origin`` other than this server's own is refused with 403 (cross-site requests and
  cross-site websockets).
* A state-changing request with a body must say what it carries: JSON everywhere; the raw file
  on the upload routes (``/v1/assets``, ``/v1/import/comfyui``), or one file part in
  ``multipart/form-data`` on ``/v1/assets`` (``curl -F``, unpacked there) and on
  ``/openai/v1/images/edits`` (the image and fields OpenAI's SDKs send) - never the text or
  urlencoded types a page can send without a preflight.
* Header bytes outside ASCII in the headers checked here answer 400, not 500.
"""

from __future__ import annotations

import functools
import ipaddress
import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:  # Litestar's ASGI types (the CLI never loads the web stack)
    from litestar.types import (
        ASGIApp,
        HTTPResponseBodyEvent,
        HTTPResponseStartEvent,
        Receive,
        Scope,
        Send,
    )

#: Content types a cross-site page may send without a CORS preflight.
SIMPLE_TYPES = ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data")
STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
RAW_UPLOADS = ("/v1/assets", "/v1/import/comfyui", "/openai/v1/images/edits")
#: Simple types an upload route still takes: a file part in a form (``curl -F``, or OpenAI's
#: image edits as its SDKs upload them), unpacked by the route; a cross-site page sending one
#: is refused by the ``Origin`` check first.
FORM_UPLOADS = {
    "/v1/assets": ("multipart/form-data",),
    "/openai/v1/images/edits": ("multipart/form-data",),
}
#: Routes answering errors in OpenAI's shape (``type`` and ``param`` too).
OPENAI_PREFIX = "/openai/"
#: Routes answering errors in Anthropic's shape (``{"type": "error", "error": {type, message}}``).
ANTHROPIC_PREFIX = "/anthropic/"
#: Anthropic's error type by status, for the refusals here.
ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
}
CHECKED = (b"host", b"origin", b"content-type", b"authorization")


def split_host(authority: str) -> str:
    """The host part of ``host[:port]`` / ``[v6]:port``, lowercased."""
    authority = authority.strip().lower()
    if authority.startswith("["):
        return authority[1 : authority.find("]")] if "]" in authority else authority
    if authority.count(":") == 1:
        return authority.rsplit(":", 1)[0]
    return authority


@functools.lru_cache(maxsize=256)  # a few names in practice; bounded against hostile ones
def _is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _unspecified(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


class HostPolicy:
    """Which ``Host`` names this server answers to."""

    def __init__(self, listen: str, allowed: Iterable[str] = ()) -> None:
        names = {a.strip().lower() for a in allowed if a.strip()}
        self.any = "*" in names
        if listen and not _unspecified(listen):
            names.add(split_host(listen) if not listen.startswith("[") else listen.strip("[]"))
        self.names = frozenset(names)

    def allows(self, host: str) -> bool:
        return self.any or _is_loopback(host) or host in self.names


Refusal = tuple[int, list[tuple[bytes, bytes]], bytes]


def error_body(path: str, status: int, code: str, message: str) -> bytes:
    """The error answered on ``path``: the contract's envelope, in the shape OpenAI's or
    Anthropic's clients parse on their routes."""
    if path.startswith(ANTHROPIC_PREFIX):
        kind = ANTHROPIC_TYPES.get(status, "invalid_request_error")
        return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()
    error: dict[str, Any] = {"code": code, "message": message}
    if path.startswith(OPENAI_PREFIX):  # what OpenAI's clients parse
        error |= {"type": "invalid_request_error", "param": None}
    return json.dumps({"error": error}).encode()


def _refuse(path: str, status: int, code: str, message: str) -> Refusal:
    body = error_body(path, status, code, message)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    return status, headers, body


def _json_type(ctype: str) -> bool:
    main = ctype.split(";", 1)[0].strip().lower()
    return main == "application/json" or (
        main.startswith("application/") and main.endswith("+json")
    )


def check_request(scope: Scope, policy: HostPolicy) -> Refusal | None:
    """Why this request is refused (status, headers, body), or None to let it through."""
    path: str = scope.get("path", "")
    headers: dict[bytes, bytes] = {}
    for k, v in scope.get("headers", []):
        key = k.lower()
        if key in CHECKED:
            headers[key] = v
    decoded: dict[bytes, str] = {}
    for key, value in headers.items():
        try:
            decoded[key] = value.decode("ascii")
        except UnicodeDecodeError:
            name = key.decode()
            return _refuse(path, 400, "bad_request", f"The {name} header must be ASCII.")
    host_header = decoded.get(b"host")
    if host_header is not None:
        host = split_host(host_header)
        if not policy.allows(host):
            return _refuse(
                path,
                403,
                "forbidden",
                f"Host '{host}' does not name this server; add it to INLINE_ALLOWED_HOSTS.",
            )
    origin = decoded.get(b"origin")
    if origin is not None and not _same_origin(origin, host_header):
        return _refuse(
            path, 403, "forbidden", f"Cross-origin requests are refused (Origin {origin})."
        )
    if scope["type"] == "http" and scope.get("method") in STATE_CHANGING and _has_body(scope):
        ctype = decoded.get(b"content-type", "")
        main = ctype.split(";", 1)[0].strip().lower()
        route = path.rstrip("/")
        if route in RAW_UPLOADS:
            if main in SIMPLE_TYPES and main not in FORM_UPLOADS.get(route, ()):
                return _refuse(
                    path,
                    415,
                    "unsupported_media_type",
                    f"Upload the raw file with its own type, not {main}: curl --data-binary "
                    f"@file -H 'Content-Type: application/octet-stream' {route}",
                )
        elif not _json_type(ctype):
            got = main or "no Content-Type"
            return _refuse(
                path,
                415,
                "unsupported_media_type",
                f"This route takes JSON (Content-Type: application/json), not {got}.",
            )
    return None


def _same_origin(origin: str, host_header: str | None) -> bool:
    if host_header is None:
        return False
    parts = urlsplit(origin.strip())
    if parts.scheme not in ("http", "https", "ws", "wss") or not parts.netloc:
        return False
    return parts.netloc.lower() == host_header.strip().lower()


def _has_body(scope: Scope) -> bool:
    for k, v in scope.get("headers", []):
        key = k.lower()
        if key == b"transfer-encoding":
            return True
        if key == b"content-length":
            return v.strip() not in (b"0", b"")
    return False


def request_guard(policy: HostPolicy) -> Any:
    """The ASGI middleware applying ``check_request`` to every HTTP and websocket request."""

    def factory(app: ASGIApp) -> ASGIApp:
        async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] not in ("http", "websocket"):
                await app(scope, receive, send)
                return
            refused = check_request(scope, policy)
            if refused is None:
                await app(scope, receive, send)
                return
            await refuse(scope, send, refused, close_code=4403)

        return middleware

    return factory


async def refuse(scope: Scope, send: Send, refusal: Refusal, *, close_code: int) -> None:
    """Answer with ``refusal`` (status, headers, body) before any app code ran; a websocket is
    closed with ``close_code`` instead."""
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": close_code})
        return
    status, headers, body = refusal
    start: HTTPResponseStartEvent = {
        "type": "http.response.start",
        "status": status,
        "headers": list(headers),
    }
    await send(start)
    end: HTTPResponseBodyEvent = {"type": "http.response.body", "body": body, "more_body": False}
    await send(end)
