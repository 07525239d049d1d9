"""Port kinds of the /v1 contract (section 2) and the rule of which kind may feed which."""

from __future__ import annotations

from typing import Final, Literal

PortKind = Literal[
    "image",
    "image[]",
    "video",
    "audio",
    "text",
    "mask",
    "model",
    "vae",
    "text-encoder",
    "lora",
    "conditioning",
    "latent",
    "control",
    "character",
    "payload",
    "payload[]",
    "dataset",
    "metrics",
    "mesh",
]

PORT_KINDS: Final[frozenset[str]] = frozenset(PortKind.__args__)  # type: ignore[attr-defined]

#: Kinds whose values are media bytes (they become takes when a node has an ``outputKind``).
MEDIA_KINDS: Final[frozenset[str]] = frozenset(
    {"image", "video", "audio", "mask", "control", "mesh"}
)

#: Kinds whose values are opaque objects living in the worker that made them.
HANDLE_KINDS: Final[frozenset[str]] = frozenset(
    {"model", "vae", "text-encoder", "lora", "conditioning", "latent", "character", "payload"}
)


def is_list_kind(kind: str) -> bool:
    """True for list ports (``image[]``, ``payload[]``), which accept any number of edges."""
    return kind.endswith("[]")


def port_satisfies(source: str, target: str) -> bool:
    """Whether an output of kind ``source`` may feed an input of kind ``target`` (contract 2)."""
    return (
        source == target
        or (source == "image" and target in ("image[]", "control"))
        or (source == "payload" and target == "payload[]")
    )
