"""Every HTTP route: /v1, /openai/v1, /anthropic/v1, the ComfyUI import, downloads and health,
on Litestar."""

from ..guard import InsecureBind, check_bind, is_loopback
from ._app import create_app
from ._server import serve

__all__ = ("InsecureBind", "check_bind", "create_app", "is_loopback", "serve")
