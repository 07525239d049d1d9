"""Hosted text models, as ``/openai/v1/models`` lists them and ``chat/completions`` runs them.

An id is ``<provider>/<model>``: it runs on the hosted chat node of that namespace
(``anthropic/<model>`` on ``anthropic/complete``), with ``model`` set to the provider's name.
Which nodes those are is handed in from above, as their descriptors declare them (a chat node
whose ``model`` is a provider's name, not a models-dir picker): no node id is written here.
``INLINE_HOSTED_MODELS`` (comma-separated ids) replaces the default list.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ._secrets import node_service

DEFAULT_MODELS: Final = (
    "anthropic/claude-opus-4-1",
    "anthropic/claude-sonnet-4-5",
    "anthropic/claude-haiku-4-5",
    "google/gemini-2.5-pro",
    "google/gemini-2.5-flash",
)


@dataclass(frozen=True, slots=True)
class HostedNode:
    """A hosted chat node: its type (whose namespace is the provider), its key param (a
    ``*_secret`` param) and the secret that param names by default."""

    node: str
    secret_param: str
    secret: str

    @property
    def provider(self) -> str:
        """The provider whose model ids it runs (its namespace, its secrets' service)."""
        return node_service(self.node)


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
    #: the node's param that names the secret
    secret_param: str

    def params(self) -> dict[str, Any]:
        """The node params that select this model (merge the request's own over them)."""
        return {"model": self.model, self.secret_param: self.secret}


def hosted_model(
    model_id: str,
    nodes: Sequence[HostedNode],
    services: Mapping[str, str | None] | None = None,
) -> HostedModel | None:
    """``<provider>/<model>`` as a ``HostedModel`` on the first of ``nodes`` of that provider;
    None for other ids. ``services`` (``SecretStore.services()``) says which secrets are stored
    for which service: ``available`` when the node's is stored for its provider."""
    provider, _, model = model_id.partition("/")
    node = next((n for n in nodes if n.provider == provider), None)
    if node is None or not model:
        return None
    held = services is not None and services.get(node.secret) == node.provider
    return HostedModel(model_id, node.node, model, node.secret, provider, held, node.secret_param)


def hosted_text_models(
    nodes: Sequence[HostedNode],
    services: Mapping[str, str | None] | None = None,
    ids: Sequence[str] = (),
) -> list[HostedModel]:
    """Every hosted text model to list: ``ids`` (the settings' ``INLINE_HOSTED_MODELS``, passed
    by the top) or the defaults, those a node of ``nodes`` runs; with ``services``,
    ``available`` says whether its key is stored."""
    found = (hosted_model(i, nodes, services) for i in (ids or DEFAULT_MODELS))
    return [m for m in found if m is not None]
