"""``/openai/v1``: OpenAI's chat and text completions (``_completions``) and models over runs of
the packs' chat nodes.

Each chat completion is a durable run (a one-node graph with the chat node that runs its model:
a local ``llm`` folder's, or a hosted model's, found by what the descriptors declare), visible in
``/v1/runs`` with its takes. A streamed completion follows the run's events: each ``delta`` of
the node's ``text`` (and ``thinking``) output becomes a content (reasoning) chunk (what streams
within a few milliseconds of the last write is joined: ``_pieces``); the tool calls and the
finish reason follow once the node is done, then ``data: [DONE]``. A completion whose run failed
for the client's mistake (missing model files, a hosted model's key not stored) is a 4xx
(``_failures``); a retry of the request, or a repeat of its ``Idempotency-Key``, follows the run
of the first try (``_attempts``). A completion whose client went (a dropped stream, a closed
connection) is cancelled once no retry of it listens any more (``_listeners``).
"""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, Response, get, post
from litestar.di import NamedDependency, Provide
from litestar.params import FromPath

from ...runs import RunService
from .._models import ModelsService
from ._attempts import Attempts, provide_attempts
from ._completions import answer_chat, answer_text
from ._listeners import Listeners, provide_listeners
from ._listing import listed_models
from ._responses import create_response
from ._schemas import ModelCard, ModelList, OpenAIError, openai_error


async def _models(models: ModelsService) -> list[ModelCard]:
    """The causal LM folders of ``models/llm/``, the hosted text models, the encoder folders of
    ``models/embeddings/``, then the image models (``_listing``)."""
    listed = await listed_models(models)
    return [ModelCard(id=m.id, created=m.created, owned_by=m.owned_by) for m in listed]


class OpenAIController(Controller):
    """OpenAI-compatible routes (auth as for ``/v1``)."""

    path = "/openai/v1"
    exception_handlers = {OpenAIError: openai_error}  # noqa: RUF012
    dependencies = {  # noqa: RUF012
        "attempts": Provide(provide_attempts, sync_to_thread=False),
        "listeners": Provide(provide_listeners, sync_to_thread=False),
    }

    @get("/models")
    async def list_models(self, models: NamedDependency[ModelsService]) -> ModelList:
        """Every chat, completion, embedding and image model, each with its owner."""
        return ModelList(data=await _models(models))

    @get("/models/{model_id:path}")
    async def get_model(
        self, models: NamedDependency[ModelsService], model_id: FromPath[str]
    ) -> ModelCard:
        model_id = model_id.lstrip("/")  # a hosted id holds its provider: anthropic/<model>
        for card in await _models(models):
            if card.id == model_id:
                return card
        raise OpenAIError(404, f"The model '{model_id}' does not exist", code="model_not_found",
                          param="model")  # fmt: skip

    @post("/responses", status_code=200)
    async def responses(
        self,
        request: Request[Any, Any, Any],
        service: NamedDependency[RunService],
        models: NamedDependency[ModelsService],
        attempts: NamedDependency[Attempts],
        listeners: NamedDependency[Listeners],
    ) -> Response[Any]:
        """OpenAI's Responses API, stateless (``_responses``)."""
        return await create_response(request, service, models, attempts, listeners)

    @post("/chat/completions", status_code=200)
    async def chat_completions(
        self,
        request: Request[Any, Any, Any],
        service: NamedDependency[RunService],
        models: NamedDependency[ModelsService],
        attempts: NamedDependency[Attempts],
        listeners: NamedDependency[Listeners],
    ) -> Response[Any]:
        """Chat completions: every request field served, or refused by name (``_completions``)."""
        return await answer_chat(request, service, models, attempts, listeners)

    @post("/completions", status_code=200)
    async def completions(
        self,
        request: Request[Any, Any, Any],
        service: NamedDependency[RunService],
        models: NamedDependency[ModelsService],
        attempts: NamedDependency[Attempts],
        listeners: NamedDependency[Listeners],
    ) -> Response[Any]:
        """Text completions (a prompt in, text out) for the same local models."""
        return await answer_text(request, service, models, attempts, listeners)
