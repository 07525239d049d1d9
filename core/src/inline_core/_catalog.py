"""Where the kernel looks node types up: a ``NodeCatalog`` seam, and a dict-backed one."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from inline_sdk import Descriptor

__all__ = ("DictCatalog", "ListingCatalog", "NodeCatalog", "NodeEntry")


@dataclass(frozen=True, slots=True)
class NodeEntry:
    """A node type as the kernel needs it: its descriptor and the pack that serves it."""

    descriptor: Descriptor
    pack: str
    pack_version: str

    @property
    def type(self) -> str:
        """The node type id."""
        return self.descriptor.type


class NodeCatalog(Protocol):
    """Looks node types up (the host's merged registry is one)."""

    def lookup(self, node_type: str) -> NodeEntry | None:
        """The entry for ``node_type``, or ``None`` when no installed pack declares it."""
        ...


@runtime_checkable
class ListingCatalog(NodeCatalog, Protocol):
    """A catalog that can also list its node types (for "did you mean" suggestions)."""

    def node_types(self) -> Iterable[str]:
        """Every node type id the catalog serves."""
        ...


class DictCatalog:
    """A ``NodeCatalog`` over a fixed set of entries; one type may be declared once only."""

    def __init__(self, entries: Iterable[NodeEntry] = ()) -> None:
        self._entries: dict[str, NodeEntry] = {}
        for entry in entries:
            known = self._entries.get(entry.type)
            if known is not None:
                raise ValueError(
                    f"node type '{entry.type}' is declared by both pack '{known.pack}' "
                    f"and pack '{entry.pack}'"
                )
            self._entries[entry.type] = entry

    def lookup(self, node_type: str) -> NodeEntry | None:
        """The entry for ``node_type``, if any."""
        return self._entries.get(node_type)

    def node_types(self) -> Iterable[str]:
        """Every node type id, in declaration order."""
        return tuple(self._entries)

    def __iter__(self) -> Iterator[NodeEntry]:
        return iter(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)
