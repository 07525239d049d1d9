"""A model's card (``inline.json`` in its folder): where it came from, what one replica of it
needs, and its settings, beside whatever else the card says (the packs read their own keys
from it: ``max_total_tokens``, ``compile``).

Every field Inline writes is recorded under ``origin`` with who wrote it (``import``,
``estimate``) and the value written. A field whose value differs from what was recorded, or
that Inline never wrote, is someone's edit: a later import or estimate never overwrites it, and
its origin reads ``user``. The card is written whole (temp file + rename).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from ._estimate import estimate_folder
from ._hf import HubError

CARD: Final = "inline.json"
ORIGIN: Final = "origin"
#: The estimate's ``replica`` keys, by the card's ``requirements`` names.
FROM_ESTIMATE: Final = {"vram_gb": "vramGb", "ram_gb": "ramGb", "devices": "gpus"}
#: ``generation_config.json`` keys kept as an LLM's generation defaults.
GENERATION_KEYS: Final = (
    "max_new_tokens", "temperature", "top_p", "top_k", "repetition_penalty", "do_sample",
)  # fmt: skip
#: What the text pack does when neither the request nor the card says.
GENERATION_DEFAULTS: Final = {"max_new_tokens": 512, "temperature": 0.7, "top_p": 1.0}
TEXT_CATEGORIES: Final = frozenset({"llm", "seq2seq"})

log = logging.getLogger("inline.hub")


class CardError(ValueError):
    """The card is not a JSON object (the message names the file)."""


def read_card(folder: Path) -> dict[str, Any]:
    """The folder's card ({} when it has none); ``CardError`` when it is not a JSON object."""
    path = folder / CARD
    try:
        card = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CardError(f"{path} is not readable JSON: {exc}") from None
    if not isinstance(card, dict):
        raise CardError(f"{path} is not a JSON object")
    return card


def _get(card: Mapping[str, Any], path: str) -> tuple[bool, Any]:
    node: Any = card
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


def _set(card: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node = card
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[last] = value


def merge_fields(card: dict[str, Any], fields: Mapping[str, Any], by: str) -> dict[str, Any]:
    """``card`` with each of ``fields`` (dotted paths: ``requirements.vram_gb``) written by
    ``by``, except those someone edited; the same dict, changed in place."""
    origin = card.get(ORIGIN)
    origin = dict(origin) if isinstance(origin, dict) else {}
    for path, value in fields.items():
        has, current = _get(card, path)
        record = origin.get(path)
        ours = isinstance(record, dict) and record.get("from") != "user"
        if not has or (ours and record is not None and record.get("value") == current):
            _set(card, path, value)
            origin[path] = {"from": by, "value": value}
        else:
            origin[path] = {"from": "user"}
    card[ORIGIN] = origin
    return card


def origin_of(card: Mapping[str, Any], path: str) -> str:
    """Who wrote ``path`` of the card (or the field holding it: ``generation`` for
    ``generation.top_p``): ``import``, ``estimate``, or ``user`` (an edit, or a field Inline
    never wrote)."""
    origin = card.get(ORIGIN)
    origin = origin if isinstance(origin, dict) else {}
    parts = path.split(".")
    for n in range(len(parts), 0, -1):
        written = ".".join(parts[:n])
        record = origin.get(written)
        if record is None:
            continue
        if not isinstance(record, dict) or record.get("from") == "user":
            return "user"
        has, current = _get(card, path)
        _, recorded = _get({"v": record.get("value")}, ".".join(["v", *parts[n:]]))
        return str(record.get("from")) if has and current == recorded else "user"
    return "user"


def write_card(folder: Path, fields: Mapping[str, Any], by: str) -> dict[str, Any]:
    """Merge ``fields`` into the card of ``folder`` (keeping every edit) and write it whole;
    the card now."""
    card = merge_fields(read_card(folder), fields, by)
    tmp = folder / f".{CARD}.tmp"
    tmp.write_text(json.dumps(card, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, folder / CARD)
    return card


def card_requirements(folder: Path) -> dict[str, Any]:
    """What the card of ``folder`` says one replica needs (``requirements``: ``vram_gb``,
    ``ram_gb``, ``devices``, ``params``, each as its owner left it); ``{}`` without a card,
    and for one that is not a JSON object (said in the log)."""
    try:
        found = read_card(folder).get("requirements")
    except CardError as exc:
        log.warning("%s", exc)
        return {}
    return dict(found) if isinstance(found, dict) else {}


def requirement_fields(estimate: Mapping[str, Any]) -> dict[str, Any]:
    """An estimate's per-replica needs as the card's ``requirements.*`` fields."""
    replica = estimate["replica"]
    fields = {"requirements.params": int(estimate["params"])}
    fields |= {f"requirements.{k}": replica[v] for k, v in FROM_ESTIMATE.items() if v in replica}
    return fields


def generation_defaults(folder: Path) -> dict[str, Any]:
    """An LLM's generation defaults: its ``generation_config.json``'s, over the text pack's."""
    out = dict(GENERATION_DEFAULTS)
    try:
        config = json.loads((folder / "generation_config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return out
    if isinstance(config, dict):
        out |= {k: config[k] for k in GENERATION_KEYS if isinstance(config.get(k), int | float)}
    return out


def import_fields(
    source: str, revision: str | None, category: str, task: str | None, folder: Path
) -> dict[str, Any]:
    """What an import writes on the card, beside the requirements."""
    fields: dict[str, Any] = {
        "source": source,
        "revision": revision,
        "task": task or category,
        "category": category,
        "compile": False,
    }
    if category in TEXT_CATEGORIES:
        fields["generation"] = generation_defaults(folder)
    return fields


def card_after_import(
    folder: Path, source: str, revision: str | None, category: str, task: str | None = None
) -> dict[str, Any] | None:
    """Write the card of a freshly imported ``folder``: its source, settings and (estimated
    from its files) requirements; None, said in the log, when the card is not a JSON object."""
    try:
        write_card(folder, import_fields(source, revision, category, task, folder), "import")
        return estimate_into_card(folder, category)
    except (CardError, OSError) as exc:
        log.warning("no model card written for %s: %s", folder, exc)
        return None


def estimate_into_card(folder: Path, category: str | None) -> dict[str, Any] | None:
    """Estimate the model in ``folder`` and record its requirements on its card; the card, or
    None (said in the log) when the folder cannot be estimated or its card is unreadable."""
    try:
        return write_card(folder, requirement_fields(estimate_folder(folder, category)), "estimate")
    except (CardError, HubError, OSError, ValueError, KeyError) as exc:
        log.warning("no requirements recorded for %s: %s", folder, exc)
        return None
