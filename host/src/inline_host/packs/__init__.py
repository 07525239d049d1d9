"""Pack management as a service (install, upgrade, rollback, remove) for the CLI and the API."""

from ._service import PackService

__all__ = ("PackService",)
