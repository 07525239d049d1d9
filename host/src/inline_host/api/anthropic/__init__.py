"""Anthropic's Messages API under ``/anthropic/v1`` (messages, streamed or not, and
``count_tokens``), over runs of the packs' chat nodes."""

from ._routes import AnthropicController, http_error
from ._schemas import AnthropicError

__all__ = ("AnthropicController", "AnthropicError", "http_error")
