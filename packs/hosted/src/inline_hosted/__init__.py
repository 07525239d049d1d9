"""The hosted pack: nodes that forward to a provider's API with its official SDK.

A hosted model has no weights here: its node holds the API key by secret name
(``api_key_secret``), which the host hands to that call only.
"""

from inline_sdk import NodeSpec, hookimpl

from ._anthropic import AnthropicComplete
from ._gemini import GeminiComplete, gemini_image

__all__ = ("inline_nodes",)


@hookimpl
def inline_nodes() -> list[NodeSpec]:
    """The nodes of this pack."""
    return [AnthropicComplete.spec, GeminiComplete.spec, gemini_image]
