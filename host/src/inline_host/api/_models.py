"""Node descriptors and models as a service: what the API's models, fit and OpenAI routes ask.

The OpenAI routes find their nodes by what the descriptors declare, never by node id: a chat
node has the SDK's chat shape (``is_chat_node``); its ``model`` param is a picker of ``llm``
folders of the architecture it runs (a local node), or a provider's model names with a
``*_secret`` key param (a hosted node). An embedding node has the SDK's embedding shape
(``is_embedding_node``) and its ``model`` param picks the encoder folders of
``models/embeddings/``. What answers from the packs refreshes them first (a
pack installed from the CLI while serving), and what a request would read again each time (the
chat nodes, each folder's ``config.json``, the secrets file) is kept until packs.lock, the
models dir or the secrets file changes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from inline_sdk import Descriptor
from inline_sdk.chat import is_chat_node
from inline_sdk.embed import is_embedding_node

from .._settings import Settings
from ..comfyui import registry_mappings
from ..hub import (
    SECRET_PARAM_SUFFIX,
    HostedModel,
    HostedNode,
    SecretError,
    SecretStore,
    hosted_model,
    hosted_text_models,
)
from ..models import (
    CATEGORIES,
    CATEGORY,
    ENCODERS,
    ModelCatalogs,
    UnsafeName,
    budget_of,
    encoder_entries,
    fit,
    fit_answer,
    inventory_for,
    llm_entries,
)
from ..runs import Engine


@dataclass(frozen=True, slots=True)
class ChatModel:
    """A model chat clients may name: the node that runs it and the params that select it."""

    id: str
    node: str
    params: dict[str, Any] = field(default_factory=dict)
    created: int = 0
    owned_by: str = "inline"
    #: a hosted model: whether its key is stored (it can be called now)
    available: bool = True


@dataclass(frozen=True, slots=True)
class EmbeddingModel:
    """A model embeddings clients may name: an encoder folder, and the node that runs it."""

    id: str
    node: str
    created: int = 0

    @property
    def params(self) -> dict[str, Any]:
        """The params that select it."""
        return {"model": self.id}


@dataclass(frozen=True, slots=True)
class ChatNodes:
    """The chat nodes the packs declare: local ones (node type, the architecture of the
    ``llm`` folders it runs, None: undeclared), then hosted ones."""

    local: tuple[tuple[str, str | None], ...]
    hosted: tuple[HostedNode, ...]


def chat_nodes(descriptors: list[Descriptor]) -> ChatNodes:
    """The chat nodes among ``descriptors``, in registration order (see the module docstring;
    a hosted node without a ``*_secret`` param is none: no key could reach it)."""
    local: list[tuple[str, str | None]] = []
    hosted: list[HostedNode] = []
    for d in descriptors:
        if not is_chat_node(d):
            continue
        model = d.param("model")
        if model is not None and model.options_from == CATEGORY:
            local.append((d.type, d.architecture("model")))
            continue
        key = next((f for f in d.params if f.key.endswith(SECRET_PARAM_SUFFIX)), None)
        if key is not None and isinstance(key.default, str) and key.default:
            hosted.append(HostedNode(d.type, key.key, key.default))
    return ChatNodes(tuple(local), tuple(hosted))


def embedding_nodes(descriptors: list[Descriptor]) -> tuple[str, ...]:
    """The embedding nodes among ``descriptors`` whose ``model`` picks ``models/embeddings/``
    folders, in registration order."""
    out = []
    for d in descriptors:
        model = d.param("model")
        if is_embedding_node(d) and model is not None and model.options_from == ENCODERS:
            out.append(d.type)
    return tuple(out)


class UnknownModel(LookupError):
    """A ``<category>/<name>`` that names no model file."""


class ModelsService:
    """Descriptors as served now (pickers filled from the models dir), and the fit answer."""

    def __init__(self, engine: Engine, settings: Settings) -> None:
        self._engine = engine
        self._settings = settings
        self._chat: tuple[str, ChatNodes] | None = None  # by registry version
        self._embed: tuple[str, tuple[str, ...]] | None = None  # by registry version
        self._services: tuple[tuple[int, ...], dict[str, str | None]] | None = None  # by stat

    async def refresh(self) -> None:
        """Pick up packs installed from the CLI while serving."""
        await self._engine.refresh()

    async def declared(self) -> list[Descriptor]:
        """Every node's descriptor as its pack declares it (pickers not filled: nothing read
        from the models dir), after picking up packs installed from the CLI."""
        await self.refresh()
        return self._engine.registry.descriptors()

    def registry_version(self) -> str:
        return self._engine.registry_version()

    def descriptors(self) -> list[Descriptor]:
        return self._engine.descriptors()

    def descriptor(self, node_type: str) -> Descriptor | None:
        return self._engine.descriptor(node_type)

    def comfyui_mappings(self) -> list[Any]:
        """The ComfyUI mappings the installed packs declare (from their cached handshakes)."""

        return registry_mappings(self._engine.registry)

    @property
    def catalogs(self) -> ModelCatalogs:
        """The models dir's catalogs (pickers, folders)."""
        return self._engine.catalogs

    async def chat_models(self) -> list[ChatModel]:
        """Every chat model clients may name now: the ``llm`` folders of each local chat node's
        architecture, then the hosted text models (``anthropic/<model>``...)."""
        await self.refresh()
        nodes = self._chat_nodes()
        out: list[ChatModel] = []
        seen: set[str] = set()
        for node, arch in nodes.local:
            for name in self._folders(arch):
                if name in seen:
                    continue
                seen.add(name)
                folder = self.catalogs.find(CATEGORY, name)
                created = int(folder.stat().st_mtime) if folder is not None else 0
                out.append(ChatModel(name, node, {"model": name}, created))
        out += [_hosted(m) for m in self._hosted_models(nodes)]
        return out

    async def chat_model(self, model_id: str) -> ChatModel | None:
        """The chat model ``model_id`` names now (a folder of ``models/llm/`` a local chat node
        runs, or a hosted model's id), or None."""
        await self.refresh()
        nodes = self._chat_nodes()
        if "/" not in model_id:  # a folder name (a hosted id always holds its provider)
            for node, arch in nodes.local:
                if model_id in self._folders(arch):
                    return ChatModel(model_id, node, {"model": model_id})
            return None
        hosted = hosted_model(model_id, nodes.hosted, self._secret_services())
        return _hosted(hosted) if hosted is not None else None

    async def embedding_models(self) -> list[EmbeddingModel]:
        """Every embedding model clients may name now: the encoder folders of
        ``models/embeddings/``, run by the first embedding node."""
        await self.refresh()
        nodes = self._embedding_nodes()
        if not nodes:
            return []
        out = []
        for name in encoder_entries(self.catalogs):
            folder = self.catalogs.find(ENCODERS, name)
            created = int(folder.stat().st_mtime) if folder is not None else 0
            out.append(EmbeddingModel(name, nodes[0], created))
        return out

    async def embedding_model(self, model_id: str) -> EmbeddingModel | None:
        """The embedding model ``model_id`` names now (an encoder folder of
        ``models/embeddings/``), or None."""
        await self.refresh()
        nodes = self._embedding_nodes()
        if not nodes or model_id not in encoder_entries(self.catalogs):
            return None
        return EmbeddingModel(model_id, nodes[0])

    def _embedding_nodes(self) -> tuple[str, ...]:
        """The embedding nodes, kept until the registry changes (packs.lock)."""
        registry = self._engine.registry
        if self._embed is None or self._embed[0] != registry.version:
            self._embed = (registry.version, embedding_nodes(registry.descriptors()))
        return self._embed[1]

    def _folders(self, arch: str | None) -> tuple[str, ...]:
        """The ``llm`` folders of ``arch`` (None: a node that declares none runs them all)."""
        catalogs = self.catalogs
        return llm_entries(catalogs, arch) if arch else catalogs.entries(CATEGORY)

    def _hosted_models(self, nodes: ChatNodes) -> list[HostedModel]:
        ids = self._settings.hosted_models
        return hosted_text_models(nodes.hosted, self._secret_services(), ids)

    def _chat_nodes(self) -> ChatNodes:
        """The chat nodes, kept until the registry changes (packs.lock)."""
        registry = self._engine.registry
        if self._chat is None or self._chat[0] != registry.version:
            self._chat = (registry.version, chat_nodes(registry.descriptors()))
        return self._chat[1]

    def _secret_services(self) -> dict[str, str | None]:
        """The service each stored secret is for, read again only when the file changed."""
        store = SecretStore(self._settings.data_dir)
        try:
            st = os.stat(store.path)
            stamp: tuple[int, ...] = (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            stamp = ()
        if self._services is None or self._services[0] != stamp:
            try:
                services = store.services() if stamp else {}
            except SecretError:  # unreadable: nothing counts as stored
                services = {}
            self._services = (stamp, services)
        return self._services[1]

    def find(self, ref: str) -> Path:
        """The file ``<category>/<name>`` names; raises ``UnknownModel`` or ``UnsafeName``."""
        category, _, name = ref.partition("/")
        found = self._engine.catalogs.find(category, name) if category in CATEGORIES else None
        if found is None:
            raise UnknownModel(
                f"No model '{ref}' (expected <category>/<name>, e.g. "
                "diffusion_models/model.safetensors)."
            )
        return found

    async def fit(
        self,
        refs: list[str],
        *,
        vram_gb: float | None,
        ram_gb: float | None,
        gpus: int | None,
        width: int,
        height: int,
    ) -> dict[str, Any]:
        """Will these files run here, and how (raises ``HeaderError`` on a bad file)."""
        paths = [self.find(ref) for ref in refs]
        inventory = inventory_for(vram_gb, ram_gb, gpus)
        settings = self._settings
        placement, estimate = await anyio.to_thread.run_sync(
            lambda: fit(
                paths,
                inventory,
                profile=settings.profile or "gpu-max",
                budget=budget_of(settings),
                width=width,
                height=height,
            )
        )
        return fit_answer(placement, estimate)


def _hosted(m: HostedModel) -> ChatModel:
    return ChatModel(m.id, m.node, m.params(), 0, m.owned_by, m.available)


__all__ = (
    "ChatModel",
    "ChatNodes",
    "EmbeddingModel",
    "ModelsService",
    "UnknownModel",
    "UnsafeName",
    "chat_nodes",
    "embedding_nodes",
)
