"""What a built wheel says of itself: name, version, requirements, the pack's entry point."""

from __future__ import annotations

import configparser
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

from packaging.utils import canonicalize_name

from ._errors import PackInvalid

ENTRY_POINT_GROUP = "inline.packs"


@dataclass(frozen=True, slots=True)
class WheelMeta:
    """A wheel's core metadata and its ``inline.packs`` entry points."""

    dist: str
    version: str
    requires: tuple[str, ...]
    packs: tuple[str, ...]
    license: str | None


def read_wheel_meta(wheel: Path) -> WheelMeta:
    """Read ``*.dist-info/METADATA`` and ``entry_points.txt`` of ``wheel``."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            names = zf.namelist()
            meta_name = next(
                (n for n in names if n.count("/") == 1 and n.endswith(".dist-info/METADATA")), None
            )
            if meta_name is None:
                raise PackInvalid(str(wheel), "the wheel has no .dist-info/METADATA")
            metadata = Parser().parsestr(zf.read(meta_name).decode("utf-8", errors="replace"))
            ep_name = meta_name.replace("METADATA", "entry_points.txt")
            ep_text = zf.read(ep_name).decode() if ep_name in names else ""
    except zipfile.BadZipFile as exc:
        raise PackInvalid(str(wheel), f"not a readable wheel: {exc}") from None
    parser = configparser.ConfigParser(interpolation=None, delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    try:
        parser.read_string(ep_text)
    except configparser.Error as exc:
        raise PackInvalid(str(wheel), f"entry_points.txt does not parse: {exc}") from None
    packs = tuple(parser[ENTRY_POINT_GROUP].keys()) if parser.has_section(ENTRY_POINT_GROUP) else ()
    name = metadata.get("Name")
    version = metadata.get("Version")
    if not name or not version:
        raise PackInvalid(str(wheel), "the wheel's METADATA has no Name or Version")
    return WheelMeta(
        dist=canonicalize_name(name),
        version=version,
        requires=tuple(metadata.get_all("Requires-Dist") or ()),
        packs=packs,
        license=metadata.get("License-Expression") or metadata.get("License"),
    )


def pack_name(meta: WheelMeta, where: str) -> str:
    """The one pack a wheel provides (its ``inline.packs`` entry point name)."""
    if len(meta.packs) != 1:
        raise PackInvalid(
            where,
            f"a pack declares exactly one entry point in group '{ENTRY_POINT_GROUP}' "
            f"(found {list(meta.packs) or 'none'})",
        )
    return meta.packs[0]
