"""The /v1 HTTP API on Litestar."""

from ._app import InsecureBind, check_bind, create_app, is_loopback
from ._server import serve

__all__ = ("InsecureBind", "check_bind", "create_app", "is_loopback", "serve")
