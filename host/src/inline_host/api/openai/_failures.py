"""A run that failed, as the OpenAI error its route answers: 4xx for the client's mistake, 5xx
for ours.

The worker reports a node's exception by its type (``LiveRun.failure_types``), and
``USER_MISTAKES`` names the types that are a user's mistake. Missing model files are a 404
``model_not_found`` (the model cannot be served here; the message lists the files and the
command that fetches them, when the node says so), a missing secret is a 400 ``secret_missing``
naming it, and any other mistake (an input refused, params the node refused) a 400
``invalid_input``. A hosted model's provider that kept answering 429 is a 429
``rate_limit_exceeded`` (its node retried already). Everything else, a node's bug or a worker
that died, is a 500 ``run_failed``.
``failure_kind`` is the verdict alone, which ``/anthropic`` answers in its own shape.
Every answer for a run that ended carries ``x-should-retry: false``: a retry of the request
attaches to this same run (``_attempts``), so OpenAI's SDKs need not wait to try again.
"""

from __future__ import annotations

from typing import Final, Literal

from ..._errors import MODELS_MISSING, SECRETS_MISSING, USER_MISTAKES
from ...runs import RunService, RunState
from ._schemas import OpenAIError

__all__ = ("NO_RETRY", "RATE_LIMITED", "FailureKind", "failure_kind", "failure_type", "run_failed")

#: What tells OpenAI's SDKs (Stainless) not to retry: the answer would be the same.
NO_RETRY: Final = {"x-should-retry": "false"}
#: Remote exception types of an upstream API that rate-limited every try (the hosted pack's).
RATE_LIMITED: Final = frozenset({"RateLimited"})
#: What a failed run was, as every API dialect answers it (each in its own error shape).
FailureKind = Literal["model_missing", "secret_missing", "rate_limited", "mistake", "ours"]


def failure_type(service: RunService, state: RunState) -> str | None:
    """The remote exception type of the node that failed the run (None: not a node's own
    exception, or a run no longer in memory)."""
    run = service.runs.get(state.run_id)
    node_id = state.error.node_id if state.error is not None else None
    if run is None or node_id is None:
        return None
    return run.failure_types.get(node_id)


def failure_kind(service: RunService, state: RunState) -> FailureKind:
    """What ``state``, a run that ended in ``error``, was: the client's mistake (which one), or
    ours."""
    kind = failure_type(service, state)
    if kind in MODELS_MISSING:
        return "model_missing"
    if kind in SECRETS_MISSING:
        return "secret_missing"
    if kind in RATE_LIMITED:
        return "rate_limited"
    return "mistake" if kind in USER_MISTAKES else "ours"


def run_failed(service: RunService, state: RunState, model: str | None) -> OpenAIError:
    """The error for ``state``, a run that ended in ``error``; ``model`` as the request named
    it."""
    message = state.error.message if state.error is not None else "the run failed"
    kind = failure_kind(service, state)
    if kind == "model_missing":
        return OpenAIError(
            404,
            f"The model {model!r} cannot run here, its files are missing: {message}",
            code="model_not_found",
            param="model",
            headers=NO_RETRY,
        )
    if kind == "secret_missing":
        return OpenAIError(
            400,
            f"The model {model!r} needs a secret this server does not hold: {message}",
            code="secret_missing",
            param="model",
            headers=NO_RETRY,
        )
    if kind == "rate_limited":
        return OpenAIError(429, message, type="requests", code="rate_limit_exceeded",
                           param="model", headers=NO_RETRY)  # fmt: skip
    if kind == "mistake":
        return OpenAIError(400, message, code="invalid_input", headers=NO_RETRY)
    return OpenAIError(
        500,
        f"Run {state.run_id} failed: {message}",
        type="server_error",
        code="run_failed",
        headers=NO_RETRY,
    )
