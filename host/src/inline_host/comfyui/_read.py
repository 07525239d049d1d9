"""Reading what people bring: a UI workflow, an API prompt, or a PNG whose text chunks hold them.

Errors::

    ComfyImportError            the root: anything the importer refuses
    └── NotAWorkflow            the input is not a ComfyUI workflow (CLI exit code 2, HTTP 422)
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass
from typing import Any, Final, Literal

PNG_SIGNATURE: Final = b"\x89PNG\r\n\x1a\n"
#: The largest decompressed text chunk read (a workflow is a few hundred KB at most).
MAX_CHUNK: Final = 64 << 20


class ComfyImportError(Exception):
    """Raised when the importer refuses its input."""


class NotAWorkflow(ComfyImportError):
    """Raised when the input is neither a ComfyUI workflow (UI or API) nor a PNG carrying one."""

    def __init__(self, where: str, why: str) -> None:
        super().__init__(f"{where}: not a ComfyUI workflow: {why}")
        self.where = where
        self.why = why


@dataclass(frozen=True, slots=True)
class Workflow:
    """A workflow found in a file: ``ui`` (LiteGraph / frontend save) or ``api`` (a prompt)."""

    kind: Literal["ui", "api"]
    data: dict[str, Any]
    #: Where it came from: ``json`` or ``png:<chunk>``.
    origin: str
    #: The API prompt a PNG also carried (used when its UI workflow holds nothing runnable).
    prompt: dict[str, Any] | None = None


def png_text_chunks(data: bytes) -> dict[str, str]:
    """The ``tEXt`` / ``iTXt`` / ``zTXt`` chunks of a PNG, by keyword (the first of each)."""
    out: dict[str, str] = {}
    pos = len(PNG_SIGNATURE)
    while pos + 8 <= len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        ctype = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if len(body) < length or ctype == b"IEND":
            break
        text = _chunk_text(ctype, body)
        if text is not None and text[0] not in out:
            out[text[0]] = text[1]
    return out


def _chunk_text(ctype: bytes, body: bytes) -> tuple[str, str] | None:
    key, sep, rest = body.partition(b"\x00")
    if not sep:
        return None
    keyword = key.decode("latin-1")
    try:
        if ctype == b"tEXt":
            return keyword, rest.decode("utf-8", errors="replace")
        if ctype == b"zTXt":
            return keyword, _inflate(rest[1:]).decode("latin-1")
        if ctype == b"iTXt":
            compressed, _method = rest[0], rest[1]
            _lang, _, rest = rest[2:].partition(b"\x00")
            _translated, _, text = rest.partition(b"\x00")
            raw = _inflate(text) if compressed else text
            return keyword, raw.decode("utf-8", errors="replace")
    except (zlib.error, IndexError):
        return None
    return None


def _inflate(data: bytes) -> bytes:
    d = zlib.decompressobj()
    out = d.decompress(data, MAX_CHUNK)
    if d.unconsumed_tail:
        raise zlib.error("text chunk too large")
    return out


def is_api_prompt(data: Any) -> bool:
    """An API prompt: ``{id: {"class_type": ..., "inputs": {...}}}`` (at least one node)."""
    return (
        isinstance(data, dict)
        and bool(data)
        and all(isinstance(v, dict) and isinstance(v.get("class_type"), str) for v in data.values())
    )


def is_ui_workflow(data: Any) -> bool:
    """A UI save: ``nodes`` and ``links`` lists (LiteGraph 0.4 or the 1.x frontend)."""
    return (
        isinstance(data, dict)
        and isinstance(data.get("nodes"), list)
        and isinstance(data.get("links", []), list)
    )


def _classify(data: Any, where: str, origin: str) -> Workflow:
    if isinstance(data, dict) and isinstance(data.get("prompt"), dict) and "nodes" not in data:
        data = data["prompt"]  # a /prompt request body: {"prompt": {...}, "client_id": ...}
    if is_api_prompt(data):
        return Workflow("api", data, origin)
    if is_ui_workflow(data):
        return Workflow("ui", data, origin)
    raise NotAWorkflow(where, "expected a UI workflow (nodes and links) or an API prompt")


def _parse_json(text: str | bytes, where: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise NotAWorkflow(where, f"invalid JSON ({exc})") from None


def read_workflow(data: bytes, where: str = "input") -> Workflow:
    """The workflow in ``data`` (JSON or PNG); raise ``NotAWorkflow`` naming ``where``."""
    if data.startswith(PNG_SIGNATURE):
        chunks = png_text_chunks(data)
        ui = (
            _parse_json(chunks["workflow"], f"{where} (chunk 'workflow')")
            if "workflow" in chunks
            else None
        )
        api = (
            _parse_json(chunks["prompt"], f"{where} (chunk 'prompt')")
            if "prompt" in chunks
            else None
        )
        prompt = api if is_api_prompt(api) else None
        if isinstance(ui, dict) and is_ui_workflow(ui):
            return Workflow("ui", ui, "png:workflow", prompt)
        if prompt is not None:
            return Workflow("api", prompt, "png:prompt")
        raise NotAWorkflow(where, "a PNG without a 'workflow' or 'prompt' text chunk")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise NotAWorkflow(where, "neither JSON text nor a PNG") from None
    return _classify(_parse_json(text, where), where, "json")
