"""Node descriptors and models as a service: what the API's models and fit routes ask."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
from inline_sdk import Descriptor

from .._settings import Settings
from ..comfyui import registry_mappings
from ..hub import hosted_model, hosted_text_models
from ..models import (
    CATEGORIES,
    ModelCatalogs,
    UnsafeName,
    budget_of,
    fit,
    fit_answer,
    inventory_for,
)
from ..runs import Engine


class UnknownModel(LookupError):
    """A ``<category>/<name>`` that names no model file."""


class ModelsService:
    """Descriptors as served now (pickers filled from the models dir), and the fit answer."""

    def __init__(self, engine: Engine, settings: Settings) -> None:
        self._engine = engine
        self._settings = settings

    async def refresh(self) -> None:
        """Pick up packs installed from the CLI while serving."""
        await self._engine.refresh()

    def registry_version(self) -> str:
        return self._engine.registry_version()

    def descriptors(self) -> list[Descriptor]:
        return self._engine.descriptors()

    def descriptor(self, node_type: str) -> Descriptor | None:
        return self._engine.descriptor(node_type)

    def comfyui_mappings(self) -> list[Any]:
        """The ComfyUI mappings the installed packs declare (from their cached handshakes)."""

        return registry_mappings(self._engine.registry)

    @property
    def catalogs(self) -> ModelCatalogs:
        """The models dir's catalogs (pickers, folders)."""
        return self._engine.catalogs

    def hosted_text(self) -> list[Any]:
        """The hosted text models (``anthropic/<model>``...) OpenAI clients may name."""

        return hosted_text_models(self._settings.data_dir, self._settings.hosted_models)

    def hosted(self, model_id: str) -> Any:
        """The hosted text model ``model_id`` names, or None."""

        return hosted_model(model_id, self._settings.data_dir)

    def find(self, ref: str) -> Path:
        """The file ``<category>/<name>`` names; raises ``UnknownModel`` or ``UnsafeName``."""
        category, _, name = ref.partition("/")
        found = self._engine.catalogs.find(category, name) if category in CATEGORIES else None
        if found is None:
            raise UnknownModel(
                f"No model '{ref}' (expected <category>/<name>, e.g. "
                "diffusion_models/model.safetensors)."
            )
        return found

    async def fit(
        self,
        refs: list[str],
        *,
        vram_gb: float | None,
        ram_gb: float | None,
        gpus: int | None,
        width: int,
        height: int,
    ) -> dict[str, Any]:
        """Will these files run here, and how (raises ``HeaderError`` on a bad file)."""
        paths = [self.find(ref) for ref in refs]
        inventory = inventory_for(vram_gb, ram_gb, gpus)
        settings = self._settings
        placement, estimate = await anyio.to_thread.run_sync(
            lambda: fit(
                paths,
                inventory,
                profile=settings.profile or "gpu-max",
                budget=budget_of(settings),
                width=width,
                height=height,
            )
        )
        return fit_answer(placement, estimate)


__all__ = ("ModelsService", "UnknownModel", "UnsafeName")
