"""Who may use the API: loopback only without a token, and the bearer token check on every
HTTP request and websocket (``?token=`` there) when one is set. Anthropic's clients send theirs
as ``x-api-key``, which ``/anthropic/`` routes take too."""

from __future__ import annotations

import hmac
import ipaddress
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # Litestar's ASGI types (the CLI never loads the web stack)
    from litestar.types import ASGIApp, Receive, Scope, Send

from .._settings import Settings
from ._http import ANTHROPIC_PREFIX, error_body, refuse

UNAUTHORIZED = "A valid bearer token is required."
ANTHROPIC_UNAUTHORIZED = (
    "A valid API key is required: send the token as x-api-key (or a bearer token)."
)


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
            path: str = scope.get("path", "")
            if not given and path.startswith(ANTHROPIC_PREFIX):
                given = headers.get("x-api-key", "").strip()
            if not given and scope["type"] == "websocket":
                query = scope.get("query_string", b"").decode()
                given = next((p[6:] for p in query.split("&") if p.startswith("token=")), "")
            if hmac.compare_digest(given.encode("latin-1"), token.encode()):
                await app(scope, receive, send)
                return
            said = ANTHROPIC_UNAUTHORIZED if path.startswith(ANTHROPIC_PREFIX) else UNAUTHORIZED
            body = error_body(path, 401, "unauthorized", said)
            headers_out = [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b"Bearer"),
            ]
            await refuse(scope, send, (401, headers_out, body), close_code=4401)

        return middleware

    return factory
