"""Image nodes with a prompt, for the /openai error tests: ``weightless/picture`` misses its
weights (a user's mistake), ``weightless/buggy`` has a bug (ours), ``weightless/noise`` makes a
1x1 PNG from its seed (random when not given, as an image model's is)."""

import struct
import zlib
from typing import Annotated

from inline_sdk import Context, Image, NodeSpec, Output, Param, Port, hookimpl, node

PULL = "inline models pull weightless/picture"


class ModelsMissing(FileNotFoundError):
    """The weights are not in models/ (named like the Z-Image pack's error, which the host
    knows as a user's mistake)."""


def _png(seed: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    pixel = bytes([0, seed & 255, (seed >> 8) & 255, (seed >> 16) & 255])  # filter, R, G, B
    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(pixel))
        + chunk(b"IEND", b"")
    )


@node("weightless/picture", title="Picture (no weights)", category="Test", output_kind="image")
def picture(
    ctx: Context,
    prompt: Annotated[str | None, Port("Prompt")] = None,
    *,
    seed: Annotated[int, Param("Seed (-1 = random)", widget="seed")] = -1,
) -> Annotated[Image, Output("image", "Image")]:
    raise ModelsMissing(
        "Weightless models missing: diffusion_models/weightless.safetensors "
        f"(looked in {ctx.models_dir}/diffusion_models).\nFetch them with: {PULL}"
    )


@node("weightless/buggy", title="Buggy", category="Test", output_kind="image")
def buggy(
    ctx: Context, prompt: Annotated[str | None, Port("Prompt")] = None
) -> Annotated[Image, Output("image", "Image")]:
    raise ZeroDivisionError("a bug in the node")


@node("weightless/noise", title="Noise", category="Test", output_kind="image")
def noise(
    ctx: Context,
    prompt: Annotated[str | None, Port("Prompt")] = None,
    *,
    seed: Annotated[int, Param("Seed (-1 = random)", widget="seed")] = -1,
) -> Annotated[Image, Output("image", "Image")]:
    return Image(_png(seed))


@hookimpl
def inline_nodes() -> list[NodeSpec]:
    return [picture, buggy, noise]
