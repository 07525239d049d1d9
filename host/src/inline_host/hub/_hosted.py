"""Hosted text models, as ``/openai/v1/models`` lists them and ``chat/completions`` runs them.

An id is ``<provider>/<model>``: ``anthropic/<model>`` runs on ``anthropic/complete``,
``google/<model>`` on ``google/gemini-complete``, with ``model`` set to the provider's name.
``INLINE_HOSTED_MODELS`` (comma-separated ids) replaces the default list.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ._secrets import SecretError, SecretStore, node_service

#: provider prefix -> (node type, the secret its node names by default)
PROVIDERS: Final = {
    "anthropic": ("anthropic/complete", "ANTHROPIC_API_KEY"),
    "google": ("google/gemini-complete", "GEMINI_API_KEY"),
}
DEFAULT_MODELS: Final = (
    "anthropic/claude-opus-4-1",
    "anthropic/claude-sonnet-4-5",
    "anthropic/claude-haiku-4-5",
    "google/gemini-2.5-pro",
    "google/gemini-2.5-flash",
)


@dataclass(frozen=True, slots=True)
class HostedModel:
    """One hosted text model: its id, the node that runs it and that node's params."""

    id: str
    node: str
    model: str
    secret: str
    owned_by: str
    #: whether the secret its node names is stored for its service (it can be called now)
    available: bool

    def params(self) -> dict[str, Any]:
        """The node params that select this model (merge the request's own over them)."""
        return {"model": self.model, "api_key_secret": self.secret}


def hosted_model(model_id: str, data_dir: Path | None = None) -> HostedModel | None:
    """``anthropic/<model>`` or ``google/<model>`` as a ``HostedModel``; None for other ids."""
    provider, _, model = model_id.partition("/")
    if provider not in PROVIDERS or not model:
        return None
    node, secret = PROVIDERS[provider]
    held = False
    if data_dir is not None:
        try:
            held = SecretStore(data_dir).service_of(secret) == node_service(node)
        except SecretError:
            held = False
    return HostedModel(model_id, node, model, secret, provider, held)


def hosted_text_models(data_dir: Path | None = None, ids: Sequence[str] = ()) -> list[HostedModel]:
    """Every hosted text model to list: ``ids`` (the settings' ``INLINE_HOSTED_MODELS``, passed
    by the top) or the defaults; with ``data_dir``, ``available`` says whether its key is
    stored."""
    ids = list(ids or DEFAULT_MODELS)
    return [m for m in (hosted_model(i, data_dir) for i in ids) if m is not None]
