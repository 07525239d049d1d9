"""Values node code sees on media and reference ports."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import msgspec


@dataclass(frozen=True, slots=True)
class Media:
    """Encoded media bytes (a PNG, an MP4, a WAV...) and their file extension.

    ``data`` may be a ``memoryview`` into shared memory that is valid for the duration of the
    call only: copy it (``bytes(media.data)``) if you keep it beyond the call. ``params`` are the
    take params a generating node records with its output (the seed it used, the model file...).
    """

    data: bytes | bytearray | memoryview
    ext: str
    params: dict[str, Any] | None = None
    kind: ClassVar[str] = "image"

    def tobytes(self) -> bytes:
        """The bytes as an owned ``bytes`` object (copies a shared-memory view)."""
        return self.data if isinstance(self.data, bytes) else bytes(self.data)


@dataclass(frozen=True, slots=True)
class Image(Media):
    """An encoded image (PNG unless ``ext`` says otherwise)."""

    ext: str = "png"
    kind: ClassVar[str] = "image"


@dataclass(frozen=True, slots=True)
class Video(Media):
    """An encoded video."""

    ext: str = "mp4"
    kind: ClassVar[str] = "video"


@dataclass(frozen=True, slots=True)
class Audio(Media):
    """Encoded audio."""

    ext: str = "wav"
    kind: ClassVar[str] = "audio"


@dataclass(frozen=True, slots=True)
class Mask(Media):
    """An encoded single-channel mask image."""

    ext: str = "png"
    kind: ClassVar[str] = "mask"


@dataclass(frozen=True, slots=True)
class MeshFile(Media):
    """An encoded mesh: binary glTF 2.0 (``.glb``). Nodes usually return a ``Mesh``
    (``inline_sdk.mesh``), which the SDK writes as GLB."""

    ext: str = "glb"
    kind: ClassVar[str] = "mesh"


MEDIA_TYPES: dict[str, type[Media]] = {t.kind: t for t in (Image, Video, Audio, Mask, MeshFile)}


class PathRef(msgspec.Struct, frozen=True, tag="path", tag_field="ref"):
    """``{"ref": "path", "path": ...}``: a file on the engine's filesystem."""

    path: str


class AssetIdRef(msgspec.Struct, frozen=True, tag="asset", tag_field="ref"):
    """``{"ref": "asset", "id": "sha256-..."}``: an uploaded, content-addressed asset."""

    id: str


#: An input reference as the contract's source nodes take it (section 7.2).
AssetRef = PathRef | AssetIdRef
