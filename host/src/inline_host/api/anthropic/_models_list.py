"""``GET /anthropic/v1/models`` and ``/models/{id}``: the chat models, in Anthropic's shape.

The same chat models ``/openai/v1/models`` lists (a local ``llm`` folder's, a hosted model
whose key is stored), paged as Anthropic pages them: ``limit`` (1 to 1000, 20 by default) from
``after_id`` or up to ``before_id``, with ``has_more``, ``first_id`` and ``last_id``.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from .._models import ModelsService
from ..openai import ListedModel, listed_chat_models, rfc3339
from ._schemas import AnthropicError

__all__ = ("ModelInfo", "ModelPage", "model_info", "model_page")

DEFAULT_LIMIT: Final = 20
MAX_LIMIT: Final = 1000


class ModelInfo(msgspec.Struct, frozen=True, tag="model", tag_field="type"):
    id: str
    display_name: str
    created_at: str
    lifecycle: Literal["active"] = "active"


class ModelPage(msgspec.Struct, frozen=True):
    data: list[ModelInfo]
    has_more: bool
    first_id: str | None
    last_id: str | None


def _info(m: ListedModel) -> ModelInfo:
    return ModelInfo(id=m.id, display_name=m.id, created_at=rfc3339(m.created))


def _index(ids: list[str], cursor: str, name: str) -> int:
    try:
        return ids.index(cursor)
    except ValueError:
        raise AnthropicError(400, f"{name}: no model '{cursor}' to page from") from None


async def model_page(
    models: ModelsService, after_id: str | None, before_id: str | None, limit: int | None
) -> ModelPage:
    """One page of the chat models; raises ``AnthropicError`` naming a bad query param."""
    if after_id is not None and before_id is not None:
        raise AnthropicError(400, "before_id: give either after_id or before_id, not both")
    size = DEFAULT_LIMIT if limit is None else limit
    if not 1 <= size <= MAX_LIMIT:
        raise AnthropicError(400, f"limit: must be from 1 to {MAX_LIMIT}, got {size}")
    listed = await listed_chat_models(models)
    ids = [m.id for m in listed]
    if after_id is not None:
        start = _index(ids, after_id, "after_id") + 1
        page, more = listed[start : start + size], start + size < len(listed)
    elif before_id is not None:
        end = _index(ids, before_id, "before_id")
        page, more = listed[max(0, end - size) : end], end - size > 0
    else:
        page, more = listed[:size], size < len(listed)
    data = [_info(m) for m in page]
    first = data[0].id if data else None
    last = data[-1].id if data else None
    return ModelPage(data=data, has_more=more, first_id=first, last_id=last)


async def model_info(models: ModelsService, model_id: str) -> ModelInfo:
    """The chat model ``model_id``; a 404 in Anthropic's shape when there is none."""
    for m in await listed_chat_models(models):
        if m.id == model_id:
            return _info(m)
    raise AnthropicError(404, f"model: the model '{model_id}' does not exist")
