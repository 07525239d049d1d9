"""Importing ComfyUI workflows (UI saves, API prompts, PNGs carrying them) as ``/v1`` runs: the
pure converter (its route is in ``api``, its command in ``cli``)."""

from ._convert import Imported, Table
from ._errors import (
    MAX_NODES,
    MAX_TEXT,
    MAX_VALUES,
    TIME_LIMIT,
    Budget,
    ComfyImportError,
    ImportStopped,
    NotAWorkflow,
    TooManyNodes,
    WorkflowTooLarge,
)
from ._import import import_comfyui
from ._read import Workflow, png_text_chunks, read_workflow
from ._report import NodeReport, Report, Unmapped, render_text
from ._sources import cached_mappings, registry_mappings

__all__ = (
    "MAX_NODES",
    "MAX_TEXT",
    "MAX_VALUES",
    "TIME_LIMIT",
    "Budget",
    "ComfyImportError",
    "ImportStopped",
    "Imported",
    "NodeReport",
    "NotAWorkflow",
    "Report",
    "Table",
    "TooManyNodes",
    "Unmapped",
    "Workflow",
    "WorkflowTooLarge",
    "cached_mappings",
    "import_comfyui",
    "png_text_chunks",
    "read_workflow",
    "registry_mappings",
    "render_text",
)
