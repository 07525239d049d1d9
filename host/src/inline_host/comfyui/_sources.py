"""Where packs' mappings come from: the handshakes the registry cached (no worker started)."""

from __future__ import annotations

from pathlib import Path

import msgspec
from inline_sdk import ComfyMapping
from inline_sdk.protocol import Welcome


def mappings_of(welcomes: list[Welcome]) -> list[ComfyMapping]:
    """Every pack's mappings, in registration order."""
    return [m for w in welcomes for m in w.comfyui_mappings]


def registry_mappings(registry: object) -> list[ComfyMapping]:
    """Mappings of the packs a loaded registry serves (their cached handshakes)."""
    from inline_registry import read_cached_welcome
    from inline_registry._describe import read_described

    packs = getattr(registry, "packs", {})
    welcomes = [  # a built pack's handshake, else the description of one not built yet
        w
        for info in packs.values()
        if (w := read_cached_welcome(info.env) or read_described(info.env)) is not None
    ]
    return mappings_of(welcomes)


def cached_mappings(packs_dir: Path) -> list[ComfyMapping]:
    """Mappings from every handshake cached under ``packs_dir`` (the newest per pack), for the
    command line, which converts without building or starting any pack."""
    newest: dict[str, tuple[int, Welcome]] = {}
    found = [*packs_dir.glob("*/*/welcome-*.json"), *packs_dir.glob("*/described-*.json")]
    for path in found:
        try:
            welcome = msgspec.json.decode(path.read_bytes(), type=Welcome)
            stamp = path.stat().st_mtime_ns
        except (OSError, msgspec.DecodeError):
            continue
        if welcome.pack not in newest or newest[welcome.pack][0] < stamp:
            newest[welcome.pack] = (stamp, welcome)
    return mappings_of([w for _, w in newest.values()])
