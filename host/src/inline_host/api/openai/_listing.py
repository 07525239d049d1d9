"""Every model a client may name here, as ``/openai/v1/models`` and ``/anthropic/v1/models``
list them: the chat (and completion) models, the encoder folders, and the image models.

A local model's owner is the organisation it was imported from (its card's ``source``:
``hf:Qwen/Qwen3-0.6B`` is owned by ``Qwen``), or ``local`` for a folder put there by hand. A
hosted model is its provider's; an image node type (``alibaba/z-image-turbo``) its namespace's.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from ...hub import CardError, read_card
from ...models import CATEGORY, ENCODERS
from .._models import ModelsService
from ._images import FOLDERS, image_nodes

__all__ = ("LOCAL", "ListedModel", "listed_chat_models", "listed_models", "owner_of", "rfc3339")

#: The owner of a folder whose card names no source it was imported from.
LOCAL: Final = "local"
ModelKind = Literal["chat", "embedding", "image"]


@dataclass(frozen=True, slots=True)
class ListedModel:
    """One model as the listings show it."""

    id: str
    created: int
    owned_by: str
    kind: ModelKind


def owner_of(folder: Path | None) -> str:
    """The organisation a model folder was imported from (its card's ``source``, ``hf:ORG/NAME``
    or ``modelscope:ORG/NAME``), else ``LOCAL``."""
    if folder is None or not folder.is_dir():
        return LOCAL
    try:
        source = read_card(folder).get("source")
    except CardError:
        return LOCAL
    if not isinstance(source, str):
        return LOCAL
    scheme, colon, rest = source.partition(":")
    org, slash, _ = rest.partition("/")
    if not colon or not slash or not org or scheme in ("file", "http", "https"):
        return LOCAL
    return org


def _created(folder: Path | None) -> int:
    return int(folder.stat().st_mtime) if folder is not None and folder.exists() else 0


async def listed_chat_models(models: ModelsService) -> list[ListedModel]:
    """The chat models that can answer now (a hosted one's key stored), local folders first."""
    out: list[ListedModel] = []
    for m in await models.chat_models():
        if not m.available:
            continue
        if "/" in m.id:  # a hosted id always holds its provider
            out.append(ListedModel(m.id, m.created, m.owned_by, "chat"))
        else:
            owner = owner_of(models.catalogs.find(CATEGORY, m.id))
            out.append(ListedModel(m.id, m.created, owner, "chat"))
    return out


async def listed_models(models: ModelsService) -> list[ListedModel]:
    """Every model a request may name (each id once: the first kind that has it)."""
    out = await listed_chat_models(models)
    catalogs = models.catalogs
    for e in await models.embedding_models():
        out.append(ListedModel(e.id, e.created, owner_of(catalogs.find(ENCODERS, e.id)),
                               "embedding"))  # fmt: skip
    images = image_nodes(await models.declared())
    if images.folders is not None:
        for name in catalogs.entries(FOLDERS):
            folder = catalogs.find(FOLDERS, name)
            out.append(ListedModel(name, _created(folder), owner_of(folder), "image"))
    for d in images.nodes:
        if not d.hidden:
            owner = d.type.partition("/")[0] if "/" in d.type else LOCAL
            out.append(ListedModel(d.type, 0, owner, "image"))
    return _unique(out)


def _unique(listed: Sequence[ListedModel]) -> list[ListedModel]:
    seen: set[str] = set()
    out = []
    for m in listed:
        if m.id not in seen:
            seen.add(m.id)
            out.append(m)
    return out


def rfc3339(created: int) -> str:
    """An epoch time as RFC 3339 in UTC (``2025-02-19T00:00:00Z``), as Anthropic writes it."""
    at = datetime.datetime.fromtimestamp(created, tz=datetime.UTC)
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")
