"""Turning a node's outputs into immutable takes: bytes in the blob store, a row each.

This is the one place that decides which outputs become takes and records them: the outputs of
a run's **target** that are media or text always do; other nodes' outputs as their output kind
says (media for ``image``/``video``/``audio``, text for ``text``).
"""

from __future__ import annotations

import hashlib
import json
import secrets
import struct
import zlib
from pathlib import Path
from typing import Any, Final

from inline_core import PlannedNode
from inline_sdk.protocol import MediaValue, TextValue

from .._values import HostValue
from ._blobs import SMALL, BlobStore, blob_id
from ._store import RunStore, TakeRecord, now_ms

#: Media kinds whose values become takes.
MEDIA_TAKE_KINDS: Final = frozenset({"image", "video", "audio", "mesh"})  # mesh: a .glb
PNG_MAGIC: Final = b"\x89PNG\r\n\x1a\n"


def new_take_id() -> str:
    """``take_`` + 12 lowercase hex."""
    return "take_" + secrets.token_hex(6)


def png_with_text(data: bytes, key: str, text: str) -> bytes:
    """``data`` with an iTXt chunk ``key`` = ``text`` after the header (PNG only)."""
    if not data.startswith(PNG_MAGIC) or len(data) < 33:
        return data
    body = key.encode("latin-1") + b"\x00\x00\x00\x00\x00" + text.encode()
    chunk = struct.pack(">I", len(body)) + b"iTXt" + body
    chunk += struct.pack(">I", zlib.crc32(b"iTXt" + body) & 0xFFFFFFFF)
    ihdr_end = 8 + 4 + 4 + 13 + 4  # signature, length, type, IHDR data, CRC
    return data[:ihdr_end] + chunk + data[ihdr_end:]


def png_with_recipe(
    data: bytes | memoryview, *, node_id: str, node_type: str, params: dict[str, Any], graph: Any
) -> bytes:
    """A PNG's bytes with the recipe that made it in its ``inline`` iTXt chunk: the node, its
    type, its params and the whole graph. Every API take and every ``inline run`` output
    carries it (other bytes are returned as they are)."""
    recipe = {"node": node_id, "type": node_type, "params": params, "graph": graph}
    return png_with_text(bytes(data), "inline", json.dumps(recipe, separators=(",", ":")))


def take_url(take_id: str) -> str:
    """Where a take's bytes are served."""
    return f"/v1/takes/{take_id}/bytes"


class TakeWriter:
    """Writes media takes' bytes (content-addressed, atomically) and their stable file names;
    a text take's bytes go into the run store with its row (its ``uri`` is its URL)."""

    def __init__(self, blobs: BlobStore, takes_dir: Path, cwd: Path) -> None:
        self.blobs = blobs
        self.takes_dir = takes_dir
        self.cwd = cwd
        self._dir = str(takes_dir)
        # a take's uri: its path relative to the working dir where it is inside it
        try:
            self._uri_dir: str | None = str(takes_dir.relative_to(cwd))
        except ValueError:
            self._uri_dir = str(takes_dir)
        if self._uri_dir == ".":
            self._uri_dir = None

    def write(
        self,
        *,
        run_id: str,
        node_id: str,
        node_type: str,
        cache_key: str,
        port: str,
        kind: str,
        ext: str,
        data: bytes | memoryview,
        params: dict[str, Any],
        graph: dict[str, Any] | None,
    ) -> TakeRecord:
        """Store one output's bytes as a take: a media take's blob, then the take's own name
        for it (a fresh random id, so it links straight to its final name); a text take's
        bytes ride on its record into the run store, with its row."""
        take_id = new_take_id()
        text: bytes | None = None
        if kind == "text":
            text = bytes(data)
            bid = blob_id(hashlib.sha256(text).hexdigest())
            uri = take_url(take_id)
        else:
            if ext == "png":
                data = png_with_recipe(
                    data, node_id=node_id, node_type=node_type, params=params, graph=graph
                )
            name = f"{take_id}.{ext}"
            bid = self.blobs.put_linked(data, f"{self._dir}/{name}")
            uri = name if self._uri_dir is None else f"{self._uri_dir}/{name}"
        return TakeRecord(
            id=take_id,
            run_id=run_id,
            node_id=node_id,
            port=port,
            kind=kind,
            ext=ext,
            uri=uri,
            hash=bid,
            params=params,
            cache_key=cache_key,
            created_at=now_ms(),
            data=text,
        )


def take_ports(node: PlannedNode, outputs: dict[str, Any], *, is_target: bool) -> list[str]:
    """The output ports of ``node`` whose values become takes."""
    kind = node.descriptor.output_kind
    ports = []
    for port, hv in outputs.items():
        value = hv.value if isinstance(hv, HostValue) else None
        is_media = isinstance(value, MediaValue) and value.kind in MEDIA_TAKE_KINDS
        is_text = isinstance(value, TextValue)
        if (is_target and (is_media or is_text)) or (
            kind is not None and ((is_media and kind != "text") or (is_text and kind == "text"))
        ):
            ports.append(port)
    return ports


def has_takes(node: PlannedNode, *, is_target: bool) -> bool:
    """Whether ``node`` may produce takes at all (else it is never announced by ``node_done``)."""
    return is_target or node.descriptor.output_kind is not None


class TakeRecorder:
    """Writes a node's take-worthy outputs durably and links them to their run."""

    def __init__(self, writer: TakeWriter, store: RunStore) -> None:
        self.writer = writer
        self.store = store

    def record(
        self,
        run_id: str,
        node: PlannedNode,
        values: dict[str, tuple[str, str, bytes | memoryview]],
        graph: dict[str, Any] | None,
        *,
        rows: bool = True,
    ) -> list[TakeRecord]:
        """Store ``values`` (port -> kind, ext, bytes) as takes of ``run_id`` (blocking I/O):
        their files, and (``rows``) their rows, else the caller stores those."""
        records = [
            self.writer.write(
                run_id=run_id,
                node_id=node.id,
                node_type=node.type,
                cache_key=node.key,
                port=port,
                kind=kind,
                ext=ext,
                data=data,
                params=node.params,
                graph=graph,
            )
            for port, (kind, ext, data) in values.items()
        ]
        if records and rows:
            self.store.add_takes(run_id, records)
        return records

    def rows_now(self, run_id: str, records: list[TakeRecord]) -> bool:
        """Store the rows of takes ``record`` wrote, if the store takes them without waiting
        (``RunStore.attempt``); False when the caller must store them off the event loop."""
        return not records or self.store.attempt(self.store.add_takes, run_id, records)[0]

    def reuse(self, run_id: str, node: PlannedNode) -> list[TakeRecord]:
        """The takes stored for ``node``'s cache key, linked to ``run_id`` (a cache hit)."""
        records = self.store.takes_for_key(node.key)
        if records:
            self.store.link_takes(run_id, [t.id for t in records])
        return records


def all_small_text(values: dict[str, tuple[str, str, bytes | memoryview]]) -> bool:
    """Whether every value is text of a few bytes (recorded without leaving the event loop:
    a row each, tens of microseconds)."""
    return all(kind == "text" and len(data) < SMALL for kind, _, data in values.values())


def take_bytes(value: Any, read: Any) -> tuple[str, str, bytes | memoryview]:
    """(kind, ext, bytes) of an output value; ``read`` copies media bytes out."""
    if isinstance(value, TextValue):
        return "text", "txt", value.text.encode("utf-8")
    assert isinstance(value, MediaValue)
    return value.kind, value.ext, read(value)
