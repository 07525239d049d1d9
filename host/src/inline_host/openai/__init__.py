"""OpenAI's API under ``/openai/v1`` (chat completions, models), over ``text/complete`` runs."""

from ..models._llm import NODE_ARCH, architecture, llm_entries, narrow
from ._routes import OpenAIController
from ._schemas import OpenAIError

__all__ = ("NODE_ARCH", "OpenAIController", "OpenAIError", "architecture", "llm_entries", "narrow")
