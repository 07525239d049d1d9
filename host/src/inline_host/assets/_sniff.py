"""An asset's kind from its magic bytes (never from a client's Content-Type header).

Images: PNG, JPEG, WebP, GIF. Video: MP4/MOV (ISO BMFF ``ftyp``), WebM/Matroska, AVI.
Audio: WAV, MP3, Ogg, FLAC, M4A. Anything else is refused (``AssetRefused``), as is an empty body.
"""

from __future__ import annotations

from typing import Final

__all__ = ("EMPTY_HINT", "RAW_HINT", "AssetRefused", "sniff_kind")

RAW_HINT: Final = (
    "Send the raw file as the body: curl --data-binary @photo.png "
    "-H 'Content-Type: application/octet-stream' http://127.0.0.1:8848/v1/assets"
)
EMPTY_HINT: Final = "The body is empty. " + RAW_HINT
KNOWN: Final = "PNG, JPEG, WebP, GIF, MP4/MOV, WebM/MKV, AVI, WAV, MP3, Ogg, FLAC or M4A"
_AUDIO_BRANDS: Final = (b"M4A ", b"M4B ", b"F4A ")


class AssetRefused(ValueError):
    """An upload that is not a media file Inline reads; ``status`` is the HTTP answer."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


def sniff_kind(data: bytes, *, what: str = "the body", hint: str = RAW_HINT) -> tuple[str, str]:
    """``(kind, ext)`` of a media file (``("image", "png")``); raises ``AssetRefused`` naming
    ``what`` was refused, followed by ``hint``."""
    tail = f" {hint}" if hint else ""
    if not data:
        raise AssetRefused(400, f"{what[0].upper()}{what[1:]} is empty.{tail}")
    head = data[:16]
    found = _match(head)
    if found is None:
        message = f"Unsupported media: {what} is not a {KNOWN} file ({_describe(head)}).{tail}"
        raise AssetRefused(415, message)
    return found


def _match(head: bytes) -> tuple[str, str] | None:
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image", "png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image", "jpg"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "image", "gif"
    if head.startswith(b"RIFF") and len(head) >= 12:
        return {
            b"WEBP": ("image", "webp"),
            b"WAVE": ("audio", "wav"),
            b"AVI ": ("video", "avi"),
        }.get(head[8:12])
    if head[4:8] == b"ftyp":
        return ("audio", "m4a") if head[8:12] in _AUDIO_BRANDS else ("video", "mp4")
    if head.startswith(b"\x1a\x45\xdf\xa3"):
        return "video", "webm"
    if head.startswith(b"ID3") or (len(head) > 1 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0):
        return "audio", "mp3"
    if head.startswith(b"OggS"):
        return "audio", "ogg"
    if head.startswith(b"fLaC"):
        return "audio", "flac"
    return None


def _describe(head: bytes) -> str:
    if head.startswith(b"--") or b"Content-Disposition" in head:
        return "it looks like a multipart form"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError:
        return f"it starts with bytes {head[:8].hex(' ')}"
    return "it looks like text"
