"""The /v1 HTTP API on Litestar."""

from ._app import InsecureBind, check_bind, create_app, is_loopback

__all__ = ("InsecureBind", "check_bind", "create_app", "is_loopback")
