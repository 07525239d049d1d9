"""A typed Python client for Inline's /v1 API."""

__all__ = ()
