"""OpenAI's API under ``/openai/v1`` (chat completions, images, models), over runs of the
packs' nodes."""

from ._images import OpenAIImagesController
from ._routes import OpenAIController
from ._schemas import OpenAIError

__all__ = ("OpenAIController", "OpenAIError", "OpenAIImagesController")
