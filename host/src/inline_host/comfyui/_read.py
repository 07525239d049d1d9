"""Reading what people bring: a UI workflow, an API prompt, or a PNG whose text chunks hold them.

Only the chunks a workflow lives in (``workflow``, ``prompt``) are read, and never inflated past
``MAX_TEXT`` together; text holding a lone surrogate (``"\\ud800"``) is refused, since nothing
can encode it. The errors are drawn in ``_errors``.
"""

from __future__ import annotations

import json
import re
import struct
import zlib
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Final, Literal

from ._errors import MAX_TEXT, NotAWorkflow, WorkflowTooLarge

PNG_SIGNATURE: Final = b"\x89PNG\r\n\x1a\n"
#: The text chunks a ComfyUI workflow is saved in.
WORKFLOW_KEYWORDS: Final = ("workflow", "prompt")
TEXT_CHUNKS: Final = frozenset({b"tEXt", b"zTXt", b"iTXt"})
#: A PNG keyword is 1 to 79 bytes, then a NUL.
MAX_KEYWORD: Final = 80
#: The most bytes an iTXt language tag and translated keyword may take together.
MAX_ITXT_HEADER: Final = 4096
#: How much is inflated at a time.
INFLATE_STEP: Final = 1 << 20
#: A JSON escape that may decode to a lone surrogate (only then is the parsed text walked).
SURROGATE_ESCAPE: Final = re.compile(r"\\u[dD][89a-fA-F]")
SURROGATE: Final = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True, slots=True)
class Workflow:
    """A workflow found in a file: ``ui`` (LiteGraph / frontend save) or ``api`` (a prompt)."""

    kind: Literal["ui", "api"]
    data: dict[str, Any]
    #: Where it came from: ``json`` or ``png:<chunk>``.
    origin: str
    #: The API prompt a PNG also carried (used when its UI workflow holds nothing runnable).
    prompt: dict[str, Any] | None = None


def png_text_chunks(
    data: bytes,
    keywords: Collection[str] = WORKFLOW_KEYWORDS,
    *,
    limit: int = MAX_TEXT,
    where: str = "input",
) -> dict[str, str]:
    """The ``tEXt`` / ``iTXt`` / ``zTXt`` chunks of a PNG whose keyword is one of ``keywords``
    (the first of each). Other chunks are skipped unread; past ``limit`` bytes of text in all,
    ``WorkflowTooLarge`` is raised before anything more is inflated."""
    wanted = {k.encode("latin-1") for k in keywords}
    view = memoryview(data)
    out: dict[str, str] = {}
    left = limit
    pos = len(PNG_SIGNATURE)
    while pos + 8 <= len(data) and len(out) < len(wanted):
        (length,) = struct.unpack_from(">I", data, pos)
        ctype = data[pos + 4 : pos + 8]
        start, end = pos + 8, pos + 8 + length
        pos = end + 4
        if end > len(data) or ctype == b"IEND":
            break
        if ctype not in TEXT_CHUNKS:
            continue
        nul = data.find(b"\x00", start, min(end, start + MAX_KEYWORD))
        if nul < 0 or data[start:nul] not in wanted:
            continue
        keyword = data[start:nul].decode("latin-1")
        if keyword in out:
            continue
        try:
            raw = _chunk_text(ctype, view[nul + 1 : end], left)
        except _OverCap:
            what = f"the PNG's {ctype.decode()} chunk {keyword!r}"
            raise WorkflowTooLarge(where, what, limit) from None
        if raw is not None:
            left -= len(raw[0])
            out[keyword] = raw[0].decode(raw[1], errors="replace")
    return out


class _OverCap(Exception):
    """A chunk's text is over what is left of the cap."""


def _chunk_text(ctype: bytes, rest: memoryview, left: int) -> tuple[bytes, str] | None:
    """A chunk's text (after its keyword) as bytes and their encoding; ``None`` when damaged;
    ``_OverCap`` past ``left`` bytes."""
    try:
        if ctype == b"tEXt":
            if len(rest) > left:
                raise _OverCap
            return bytes(rest), "utf-8"
        if ctype == b"zTXt":
            return _inflate(rest[1:], left), "latin-1"
        compressed = rest[0]  # iTXt: flag, method, language NUL, translated keyword NUL, text
        tail = bytes(rest[2 : 2 + MAX_ITXT_HEADER])
        lang_end = tail.find(b"\x00")
        key_end = tail.find(b"\x00", lang_end + 1)
        if lang_end < 0 or key_end < 0:
            return None
        text = rest[2 + key_end + 1 :]
        if not compressed and len(text) > left:
            raise _OverCap
        return (_inflate(text, left) if compressed else bytes(text)), "utf-8"
    except (zlib.error, IndexError):
        return None


def _inflate(data: memoryview, left: int) -> bytes:
    """``data`` inflated a step at a time, raising ``_OverCap`` as soon as it passes ``left``
    bytes: a bomb is never inflated (or held) past the cap."""
    inflater = zlib.decompressobj()
    parts: list[bytes] = []
    size = 0
    pending: bytes | memoryview = data
    for _ in range(left // INFLATE_STEP + 2):  # every round but the last adds a whole step
        part = inflater.decompress(pending, INFLATE_STEP)
        size += len(part)
        if size > left:
            raise _OverCap
        parts.append(part)
        pending = inflater.unconsumed_tail
        if inflater.eof or len(part) < INFLATE_STEP:
            return b"".join(parts)
    raise _OverCap


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


def _parse_json(text: str, where: str) -> Any:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise NotAWorkflow(where, f"invalid JSON ({exc})") from None
    if SURROGATE_ESCAPE.search(text):
        _refuse_surrogates(data, where)
    return data


def _refuse_surrogates(data: Any, where: str) -> None:
    """Raise ``NotAWorkflow`` naming the first string (or key) holding a lone surrogate: no
    encoder can write it, so it would fail only later, in a response or a run."""
    stack: list[tuple[Any, str]] = [(data, "$")]
    while stack:
        value, path = stack.pop()
        if isinstance(value, dict):
            for key, item in reversed(value.items()):
                if SURROGATE.search(key):
                    _surrogate(where, f"{path} (a key)", key)
                stack.append((item, f"{path}.{key}"))
        elif isinstance(value, list):
            stack.extend((item, f"{path}[{i}]") for i, item in reversed(list(enumerate(value))))
        elif isinstance(value, str) and SURROGATE.search(value):
            _surrogate(where, path, value)


def _surrogate(where: str, path: str, text: str) -> None:
    found = SURROGATE.search(text)
    code = f"\\u{ord(found.group()):04x}" if found else "a surrogate"
    raise NotAWorkflow(
        where,
        f"the text at {path.encode('ascii', 'backslashreplace').decode()} holds a lone "
        f"surrogate ({code}), half of a UTF-16 pair: not Unicode text, so it cannot be imported",
    )


def read_workflow(data: bytes, where: str = "input") -> Workflow:
    """The workflow in ``data`` (JSON or PNG); raise ``NotAWorkflow`` (or ``WorkflowTooLarge``)
    naming ``where``."""
    if data.startswith(PNG_SIGNATURE):
        chunks = png_text_chunks(data, where=where)
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
    if len(data) > MAX_TEXT:
        raise WorkflowTooLarge(where, "the workflow", MAX_TEXT)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise NotAWorkflow(where, "neither JSON text nor a PNG") from None
    return _classify(_parse_json(text, where), where, "json")
