"""The operator token: what installing packs, granting consents, starting or cancelling
downloads (which may name a secret) and every deployment route over HTTP require.

With ``INLINE_TOKEN`` set it is that token. Without one, the host keeps a random token in
``<data dir>/operator-token`` (mode 0600, created once): a local tool that may administer
this host reads it from there; a web page, even one on this machine, cannot.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the guards' Litestar types (the CLI reads the token without the web stack)
    from litestar.connection import ASGIConnection
    from litestar.handlers import BaseRouteHandler

FILE_NAME = "operator-token"


def operator_token(data_dir: Path, configured: str | None) -> str:
    """The token pack routes that change state require."""
    if configured:
        return configured
    path = data_dir / FILE_NAME
    with contextlib.suppress(OSError):
        existing = path.read_text().strip()
        if existing:
            return existing
    data_dir.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    tmp = data_dir / f".{FILE_NAME}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(token + "\n")
    try:
        os.link(tmp, path)  # never replace a token another start wrote first
    except FileExistsError:
        token = path.read_text().strip()
    finally:
        os.unlink(tmp)
    return token


def bearer_matches(authorization: str | None, token: str) -> bool:
    """Whether an ``Authorization`` header carries ``token`` as a bearer token."""
    if not authorization:
        return False
    given = authorization.removeprefix("Bearer ").strip()
    return hmac.compare_digest(given.encode("latin-1", "replace"), token.encode())


def guard_operator(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """A Litestar guard: state-changing requests need the operator token, even on loopback."""
    if connection.scope.get("method", "GET") not in ("POST", "PUT", "PATCH", "DELETE"):
        return
    _require_token(
        connection,
        "Installing, changing or removing packs, granting consents, and starting or "
        "cancelling downloads over HTTP need the operator token",
    )


def guard_operator_always(
    connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler
) -> None:
    """A Litestar guard: every request needs the operator token (deployments: reading them
    shows what runs where)."""
    _require_token(connection, "Deployments over HTTP need the operator token")


def _require_token(connection: ASGIConnection[Any, Any, Any, Any], what: str) -> None:
    token: str = connection.app.state.operator_token
    if not bearer_matches(connection.headers.get("authorization"), token):
        from litestar.exceptions import NotAuthorizedException  # a server's, then loaded

        raise NotAuthorizedException(
            f"{what}: send 'Authorization: Bearer <token>' with INLINE_TOKEN, or with the "
            "token in <data dir>/operator-token."
        )
