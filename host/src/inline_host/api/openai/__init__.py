"""OpenAI's API under ``/openai/v1`` (chat and text completions, responses, embeddings, images
and their edits, models), over runs of the packs' nodes.

Besides its controllers, the face offers what serving a chat node over HTTP takes whatever the
dialect (``/anthropic`` speaks another): the one-node run of a chat request and its outputs,
retries attached to their first try, listeners that cancel an abandoned run, the streamed
pieces, the verdict on a failed run, and the models listed (``listed_chat_models``)."""

from ._attempts import Attempt, Attempts, provide_attempts, submit_once
from ._chat import NODE_ID, SEED_RANGE, chat_graph, outputs_of
from ._embeddings import OpenAIEmbeddingsController
from ._failures import NO_RETRY, FailureKind, failure_kind
from ._images import OpenAIImagesController
from ._listeners import Lease, Listeners, provide_listeners, until_answered
from ._listing import ListedModel, listed_chat_models, listed_models, rfc3339
from ._pieces import streamed
from ._routes import OpenAIController
from ._schemas import OpenAIError

__all__ = (
    "NODE_ID",
    "NO_RETRY",
    "SEED_RANGE",
    "Attempt",
    "Attempts",
    "FailureKind",
    "Lease",
    "ListedModel",
    "Listeners",
    "OpenAIController",
    "OpenAIEmbeddingsController",
    "OpenAIError",
    "OpenAIImagesController",
    "chat_graph",
    "failure_kind",
    "listed_chat_models",
    "listed_models",
    "outputs_of",
    "provide_attempts",
    "provide_listeners",
    "rfc3339",
    "streamed",
    "submit_once",
    "until_answered",
)
