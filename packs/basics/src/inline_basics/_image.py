"""Image and video nodes: the contract's ``input/image``, ``input/video``; ``image/resize``."""

import io
from typing import Annotated

from inline_sdk import AssetRef, Context, Image, InputRefused, Output, Param, Port, Video, node

NEEDS_REF = "An image input node needs a valid asset reference."
#: Pillow format name -> the file extension a take of it gets.
EXTENSIONS = {
    "PNG": "png",
    "JPEG": "jpg",
    "WEBP": "webp",
    "GIF": "gif",
    "BMP": "bmp",
    "TIFF": "tif",
}


def _check_image(data: bytes, where: str) -> str:
    """The extension of an image's format; raises ``InputRefused`` (a user's mistake, not a bug:
    a ``ValueError``) naming ``where`` if it is none."""
    from PIL import Image as PILImage
    from PIL import UnidentifiedImageError

    try:
        with PILImage.open(io.BytesIO(data)) as img:
            img.verify()
            fmt = img.format or ""
    except UnidentifiedImageError:
        kinds = ", ".join(EXTENSIONS)
        raise InputRefused(f"'{where}' is not a readable image (expected {kinds})") from None
    except (OSError, SyntaxError) as exc:
        raise InputRefused(f"'{where}' is not a readable image: {exc}") from None
    return EXTENSIONS.get(fmt, fmt.lower() or "png")


@node("input/image", title="Image", category="Input", icon="image", hidden=True)
def input_image(
    ctx: Context,
    *,
    asset: Annotated[AssetRef | None, Param("Asset", internal=True)] = None,
) -> Annotated[Image, Output("image", "Image")]:
    """The image an asset reference names (an uploaded asset id, or a path in the input roots)."""
    if asset is None:
        raise InputRefused(NEEDS_REF)
    data = ctx.read_input(asset)
    where = asset.path if hasattr(asset, "path") else asset.id  # type: ignore[union-attr]
    return Image(data, _check_image(data, where))


@node("input/video", title="Video", category="Input", icon="film", hidden=True)
def input_video(
    ctx: Context,
    *,
    asset: Annotated[AssetRef | None, Param("Asset", internal=True)] = None,
) -> Annotated[Video, Output("video", "Video")]:
    """The video an asset reference names."""
    if asset is None:
        raise InputRefused(NEEDS_REF)
    path = ctx.resolve_input(asset)
    return Video(ctx.read_input(asset), path.suffix.lstrip(".").lower() or "mp4")


@node("image/resize", title="Resize Image", category="Image", icon="image", output_kind="image")
def resize_image(
    ctx: Context,
    image: Annotated[Image, Port("Image")],
    *,
    width: Annotated[int, Param("Width", min=1, max=8192, step=1)] = 512,
    height: Annotated[int, Param("Height", min=1, max=8192, step=1)] = 512,
) -> Annotated[Image, Output("image", "Image")]:
    """The image resized to ``width`` x ``height`` with Lanczos filtering, as PNG."""
    from PIL import Image as PILImage
    from PIL import UnidentifiedImageError

    try:
        src = PILImage.open(io.BytesIO(image.data))
        src.load()
    except (UnidentifiedImageError, OSError) as exc:
        raise ValueError(f"image/resize got an input that is not a readable image: {exc}") from None
    ctx.phase("preparing", f"Resizing to {width}x{height}")
    mode = "RGBA" if "A" in src.getbands() else "RGB"
    out = src.convert(mode).resize((width, height), PILImage.Resampling.LANCZOS)
    buf = io.BytesIO()
    out.save(buf, format="PNG")
    ctx.progress(1, 1, phase="save", status="Saved")
    return Image(buf.getvalue(), "png")
