"""Running a node through the host (the engine over the data dir's registry)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
from inline_host import Engine, Settings


def settings_for(data_dir: Path, tmp: Path) -> Settings:
    return Settings.from_env(
        {
            "INLINE_SANDBOX_READ": os.environ.get("INLINE_SANDBOX_READ", ""),
            "INLINE_DATA_DIR": str(data_dir),
            "INLINE_MODELS_DIR": str(tmp / "models"),
            "INLINE_INPUT_ROOTS": str(tmp),
        }
    )


def request(node_type: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    node = {"id": "n", "type": node_type, "params": params or {}}
    return {"graph": {"schemaVersion": 1, "nodes": [node]}, "target": "n"}


def run_text(
    data_dir: Path, tmp: Path, node_type: str, params: dict[str, Any] | None = None
) -> str:
    """Open an engine, run ``node_type`` and return its ``text`` output."""

    async def go() -> str:
        async with Engine.open(settings_for(data_dir, tmp)) as engine:
            result = await engine.run(request(node_type, params))
            return result.outputs["text"].value.text  # type: ignore[union-attr]

    return anyio.run(go)


def served_types(data_dir: Path, tmp: Path) -> list[str]:
    async def go() -> list[str]:
        async with Engine.open(settings_for(data_dir, tmp)) as engine:
            return [d.type for d in engine.descriptors()]

    return anyio.run(go)
